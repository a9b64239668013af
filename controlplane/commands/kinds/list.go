package kinds

import (
	"sort"

	"github.com/better-compute/commands/sdk/kind"
)

// Source says where a registered manifest came from.
type Source string

// The sources of a registered manifest.
const (
	// SourceFirstParty: given to NewRegistry or Register (bc-server's own
	// kinds).
	SourceFirstParty Source = "first-party"
	// SourceKindsDir: read from bc-server's kindsDir (LoadDir, Reload).
	SourceKindsDir Source = "kinds-dir"
)

// Registered is one registered kind version, as kinds.list shows it.
type Registered struct {
	Manifest kind.Manifest
	// Digest is the manifest's digest, which a node's Hello must match.
	Digest string
	Source Source
	// Newest is true for the version new commands are checked against.
	Newest bool
}

// List returns every registered version of every kind: by name, newest
// version first.
func (r *Registry) List() []Registered {
	r.mu.RLock()
	defer r.mu.RUnlock()
	type tagged struct {
		e   entry
		src Source
	}
	byKind := map[string][]tagged{}
	for src, set := range map[Source]map[string][]entry{SourceFirstParty: r.builtin, SourceKindsDir: r.files} {
		for k, es := range set {
			for _, e := range es {
				byKind[k] = append(byKind[k], tagged{e, src})
			}
		}
	}
	names := make([]string, 0, len(byKind))
	for k := range byKind {
		names = append(names, k)
	}
	sort.Strings(names)
	var out []Registered
	for _, k := range names {
		ts := byKind[k]
		sort.SliceStable(ts, func(i, j int) bool { return versionLess(ts[j].e.manifest.Version, ts[i].e.manifest.Version) })
		for i, t := range ts {
			out = append(out, Registered{Manifest: t.e.manifest, Digest: t.e.digest, Source: t.src, Newest: i == 0})
		}
	}
	return out
}
