// Package kinds is the control plane's kind registry: the first-party
// manifests (the same Go values the plugins serve) and third-party manifest
// files, each validated, with their payload schemas compiled once.
package kinds

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"

	"github.com/Masterminds/semver/v3"

	"github.com/better-compute/commands/sdk/kind"
)

// ErrUnknownKind is returned for a kind the registry does not hold.
var ErrUnknownKind = errors.New("unknown kind")

// ErrDuplicateKind is returned when a second manifest names a registered kind.
var ErrDuplicateKind = errors.New("kind already registered")

// Registry holds the registered kinds. A kind may be registered in several
// versions at once (a fleet mid-upgrade runs both): Get is the newest, and
// a node that runs any registered version of a kind is dispatched to. It is
// safe for concurrent use.
type Registry struct {
	// mu guards builtin and files; LoadDir and Reload may run while the API
	// validates payloads.
	mu sync.RWMutex
	// builtin are the manifests given to NewRegistry and Register (the
	// first-party kinds); files are the kinds directory's, which Reload
	// replaces as a whole.
	builtin map[string][]entry
	files   map[string][]entry
}

type entry struct {
	manifest  kind.Manifest
	validator *kind.Validator
	digest    string
	// compatible is the manifest's CompatibleVersions, compiled (nil when
	// it declares none).
	compatible *semver.Constraints
}

// NewRegistry validates and registers manifests; two with one kind name and
// version are refused.
func NewRegistry(manifests ...kind.Manifest) (*Registry, error) {
	r := &Registry{builtin: map[string][]entry{}, files: map[string][]entry{}}
	for _, m := range manifests {
		if err := r.Register(m); err != nil {
			return nil, err
		}
	}
	return r, nil
}

func newEntry(m kind.Manifest) (entry, error) {
	if err := m.Validate(); err != nil {
		return entry{}, fmt.Errorf("registering %s: %w", m.Kind, err)
	}
	v, err := kind.NewValidator(m)
	if err != nil {
		return entry{}, fmt.Errorf("registering %s: %w", m.Kind, err)
	}
	e := entry{manifest: m, validator: v, digest: m.Digest()}
	if m.CompatibleVersions != "" {
		// Validate checked that it parses.
		if e.compatible, err = semver.NewConstraint(m.CompatibleVersions); err != nil {
			return entry{}, fmt.Errorf("registering %s: compatibleVersions: %w", m.Kind, err)
		}
	}
	return e, nil
}

// Register validates m, compiles its payload schema and adds it. A second
// manifest of a kind and version already registered is ErrDuplicateKind.
func (r *Registry) Register(m kind.Manifest) error {
	e, err := newEntry(m)
	if err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.has(m.Kind, m.Version) {
		return fmt.Errorf("registering %s %s: %w", m.Kind, m.Version, ErrDuplicateKind)
	}
	r.builtin[m.Kind] = insertSorted(r.builtin[m.Kind], e)
	return nil
}

// has reports whether kind k is registered at version v. The caller holds mu.
func (r *Registry) has(k, v string) bool {
	for _, set := range []map[string][]entry{r.builtin, r.files} {
		for _, e := range set[k] {
			if e.manifest.Version == v {
				return true
			}
		}
	}
	return false
}

// insertSorted keeps a kind's versions newest first.
func insertSorted(es []entry, e entry) []entry {
	es = append(es, e)
	sort.SliceStable(es, func(i, j int) bool { return versionLess(es[j].manifest.Version, es[i].manifest.Version) })
	return es
}

// LoadDir registers every manifest file in dir: *.json, *.yaml and *.yml,
// each holding one manifest or a list of them in kind.Manifest's JSON shape.
// It registers nothing when any file is invalid or names a kind and version
// already registered.
func (r *Registry) LoadDir(dir string) error {
	files, err := readDir(dir)
	if err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for k, es := range files {
		for _, e := range es {
			if r.has(k, e.manifest.Version) {
				return fmt.Errorf("kinds directory %s: kind %s %s: %w", dir, k, e.manifest.Version, ErrDuplicateKind)
			}
		}
	}
	for k, es := range files {
		for _, e := range es {
			r.files[k] = insertSorted(r.files[k], e)
		}
	}
	return nil
}

// Reload replaces the kinds directory's manifests with what dir holds now
// (bc-server calls it on SIGHUP): kinds and versions added there are
// registered, removed ones are gone, the first-party ones stay. A bad
// directory changes nothing and is returned. It returns what changed.
func (r *Registry) Reload(dir string) (added, removed []string, err error) {
	files, err := readDir(dir)
	if err != nil {
		return nil, nil, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for k, es := range files {
		for _, e := range es {
			for _, b := range r.builtin[k] {
				if b.manifest.Version == e.manifest.Version {
					return nil, nil, fmt.Errorf("kinds directory %s: kind %s %s: %w (built in)", dir, k, e.manifest.Version, ErrDuplicateKind)
				}
			}
		}
	}
	names := func(set map[string][]entry) map[string]bool {
		out := map[string]bool{}
		for k, es := range set {
			for _, e := range es {
				out[k+"@"+e.manifest.Version] = true
			}
		}
		return out
	}
	before, after := names(r.files), names(files)
	for n := range after {
		if !before[n] {
			added = append(added, n)
		}
	}
	for n := range before {
		if !after[n] {
			removed = append(removed, n)
		}
	}
	sort.Strings(added)
	sort.Strings(removed)
	r.files = files
	return added, removed, nil
}

// readDir parses and validates every manifest file in dir, by kind, newest
// version first.
func readDir(dir string) (map[string][]entry, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("reading manifest directory: %w", err)
	}
	out := map[string][]entry{}
	seen := map[string]string{}
	for _, e := range ents {
		ext := strings.ToLower(filepath.Ext(e.Name()))
		if e.IsDir() || (ext != ".json" && ext != ".yaml" && ext != ".yml") {
			continue
		}
		path := filepath.Join(dir, e.Name())
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("reading manifest file: %w", err)
		}
		ms, err := ParseManifests(b)
		if err != nil {
			return nil, fmt.Errorf("manifest file %s: %w", path, err)
		}
		for _, m := range ms {
			key := m.Kind + "@" + m.Version
			if other, ok := seen[key]; ok {
				return nil, fmt.Errorf("manifest file %s: kind %s %s: %w (also in %s)", path, m.Kind, m.Version, ErrDuplicateKind, other)
			}
			seen[key] = path
			en, err := newEntry(m)
			if err != nil {
				return nil, fmt.Errorf("manifest file %s: %w", path, err)
			}
			out[m.Kind] = insertSorted(out[m.Kind], en)
		}
	}
	return out, nil
}

// newest returns kind k's newest version. The caller holds mu.
func (r *Registry) newest(k string) (entry, bool) {
	var best entry
	found := false
	for _, set := range []map[string][]entry{r.builtin, r.files} {
		if es := set[k]; len(es) > 0 && (!found || versionLess(best.manifest.Version, es[0].manifest.Version)) {
			best, found = es[0], true
		}
	}
	return best, found
}

// Get returns the newest registered version of kind k.
func (r *Registry) Get(k string) (kind.Manifest, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	e, ok := r.newest(k)
	return e.manifest, ok
}

// Versions returns every registered version of kind k, newest first.
func (r *Registry) Versions(k string) []kind.Manifest {
	r.mu.RLock()
	defer r.mu.RUnlock()
	var es []entry
	for _, set := range []map[string][]entry{r.builtin, r.files} {
		for _, e := range set[k] {
			es = insertSorted(es, e)
		}
	}
	out := make([]kind.Manifest, 0, len(es))
	for _, e := range es {
		out = append(out, e.manifest)
	}
	return out
}

// Matching returns the registered version of kind k whose digest is digest
// (what a node reported in Hello): the gateway dispatches to a node that
// runs any registered version.
func (r *Registry) Matching(k, digest string) (kind.Manifest, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	for _, set := range []map[string][]entry{r.builtin, r.files} {
		for _, e := range set[k] {
			if e.digest == digest {
				return e.manifest, true
			}
		}
	}
	return kind.Manifest{}, false
}

// All returns the newest version of every registered kind, sorted by name.
func (r *Registry) All() []kind.Manifest {
	r.mu.RLock()
	defer r.mu.RUnlock()
	names := map[string]bool{}
	for _, set := range []map[string][]entry{r.builtin, r.files} {
		for k := range set {
			names[k] = true
		}
	}
	out := make([]kind.Manifest, 0, len(names))
	for k := range names {
		e, _ := r.newest(k)
		out = append(out, e.manifest)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Kind < out[j].Kind })
	return out
}

// ValidatePayload checks payload against kind k's schema. It returns an error
// wrapping ErrUnknownKind for an unregistered kind, and a *kind.PayloadError
// naming the failing field for a payload the schema refuses.
func (r *Registry) ValidatePayload(k string, payload []byte) error {
	r.mu.RLock()
	e, ok := r.newest(k)
	r.mu.RUnlock()
	if !ok {
		return fmt.Errorf("kind %q: %w", k, ErrUnknownKind)
	}
	return e.validator.Validate(payload)
}

// How a node's manifest of a kind stands with the registry (Dispatchable).
const (
	// StatusRegistered: the registry holds the node's digest.
	StatusRegistered = "registered"
	// StatusCompatible: another digest, at a version a registered
	// manifest's CompatibleVersions holds: dispatched under that manifest.
	StatusCompatible = "compatible"
	// StatusMismatch: registered, but neither the node's digest nor a
	// range that holds its version: its commands wait.
	StatusMismatch = "mismatch"
	// StatusUnregistered: no manifest of the kind is registered.
	StatusUnregistered = "unregistered"
)

// Dispatchable says under which registered manifest a node that runs kind k
// at version v (empty from an older bcd) with manifest digest d may be sent
// k's commands: the version with that digest (StatusRegistered), else the
// newest registered version whose CompatibleVersions holds v
// (StatusCompatible: a node upgraded before the registry). Otherwise the
// status is StatusMismatch with the newest version, or StatusUnregistered.
// ok is true for the first two.
func (r *Registry) Dispatchable(k, v, d string) (m kind.Manifest, status string, ok bool) {
	if mv, found := r.Matching(k, d); found {
		return mv, StatusRegistered, true
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	newest, registered := r.newest(k)
	if !registered {
		return kind.Manifest{}, StatusUnregistered, false
	}
	if nv, err := semver.NewVersion(v); err == nil && v != "" {
		var best entry
		found := false
		for _, set := range []map[string][]entry{r.builtin, r.files} {
			for _, e := range set[k] {
				if e.compatible != nil && e.compatible.Check(nv) && (!found || versionLess(best.manifest.Version, e.manifest.Version)) {
					best, found = e, true
				}
			}
		}
		if found {
			return best.manifest, StatusCompatible, true
		}
	}
	return newest.manifest, StatusMismatch, false
}
