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

	"github.com/better-compute/commands/sdk/kind"
)

// ErrUnknownKind is returned for a kind the registry does not hold.
var ErrUnknownKind = errors.New("unknown kind")

// ErrDuplicateKind is returned when a second manifest names a registered kind.
var ErrDuplicateKind = errors.New("kind already registered")

// Registry holds the registered kinds. It is safe for concurrent use.
type Registry struct {
	// mu guards entries; LoadDir may run while the API validates payloads.
	mu      sync.RWMutex
	entries map[string]entry
}

type entry struct {
	manifest  kind.Manifest
	validator *kind.Validator
}

// NewRegistry validates and registers manifests; two with one kind name are
// refused.
func NewRegistry(manifests ...kind.Manifest) (*Registry, error) {
	r := &Registry{entries: map[string]entry{}}
	for _, m := range manifests {
		if err := r.Register(m); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// Register validates m, compiles its payload schema and adds it.
func (r *Registry) Register(m kind.Manifest) error {
	if err := m.Validate(); err != nil {
		return fmt.Errorf("registering %s: %w", m.Kind, err)
	}
	v, err := kind.NewValidator(m)
	if err != nil {
		return fmt.Errorf("registering %s: %w", m.Kind, err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.entries[m.Kind]; ok {
		return fmt.Errorf("registering %s: %w", m.Kind, ErrDuplicateKind)
	}
	r.entries[m.Kind] = entry{manifest: m, validator: v}
	return nil
}

// LoadDir registers every manifest file in dir: *.json, *.yaml and *.yml,
// each holding one manifest or a list of them in kind.Manifest's JSON shape.
// It registers nothing when any file is invalid or names a registered kind.
func (r *Registry) LoadDir(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("reading manifest directory: %w", err)
	}
	var all []kind.Manifest
	seen := map[string]string{}
	for _, e := range entries {
		ext := strings.ToLower(filepath.Ext(e.Name()))
		if e.IsDir() || (ext != ".json" && ext != ".yaml" && ext != ".yml") {
			continue
		}
		path := filepath.Join(dir, e.Name())
		b, err := os.ReadFile(path)
		if err != nil {
			return fmt.Errorf("reading manifest file: %w", err)
		}
		ms, err := ParseManifests(b)
		if err != nil {
			return fmt.Errorf("manifest file %s: %w", path, err)
		}
		for _, m := range ms {
			if other, ok := seen[m.Kind]; ok {
				return fmt.Errorf("manifest file %s: kind %s: %w (also in %s)", path, m.Kind, ErrDuplicateKind, other)
			}
			seen[m.Kind] = path
			if _, ok := r.Get(m.Kind); ok {
				return fmt.Errorf("manifest file %s: kind %s: %w", path, m.Kind, ErrDuplicateKind)
			}
			if err := m.Validate(); err != nil {
				return fmt.Errorf("manifest file %s: %w", path, err)
			}
		}
		all = append(all, ms...)
	}
	for _, m := range all {
		if err := r.Register(m); err != nil {
			return err
		}
	}
	return nil
}

// Get returns the manifest of kind k.
func (r *Registry) Get(k string) (kind.Manifest, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	e, ok := r.entries[k]
	return e.manifest, ok
}

// All returns every registered manifest, sorted by kind name.
func (r *Registry) All() []kind.Manifest {
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := make([]kind.Manifest, 0, len(r.entries))
	for _, e := range r.entries {
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
	e, ok := r.entries[k]
	r.mu.RUnlock()
	if !ok {
		return fmt.Errorf("kind %q: %w", k, ErrUnknownKind)
	}
	return e.validator.Validate(payload)
}
