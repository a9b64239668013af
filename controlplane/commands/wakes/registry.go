package wakes

import (
	"fmt"
	"sort"
	"strings"
	"sync"
)

// Registry maps idempotency-key prefixes to the wakers of the modules that
// own them ("wf:rem-" for the remediation workflows, "acceptance:" for
// acceptance runs). The longest matching prefix wins. Every process that
// settles commands registers the same prefixes, so the same keys get
// wakes whichever replica settles them.
type Registry struct {
	// lock guards wakers.
	lock   sync.RWMutex
	wakers map[string]Waker
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry { return &Registry{wakers: map[string]Waker{}} }

// Register routes the wakes of keys that start with prefix to w. A prefix
// registered twice is an error: two modules cannot own one key.
func (r *Registry) Register(prefix string, w Waker) error {
	if prefix == "" || w == nil {
		return fmt.Errorf("registering a waker: prefix and waker are required")
	}
	if strings.HasPrefix(prefix, "api:") {
		return fmt.Errorf("registering a waker for %q: api: keys are the API callers', which own no wakes", prefix)
	}
	r.lock.Lock()
	defer r.lock.Unlock()
	if _, ok := r.wakers[prefix]; ok {
		return fmt.Errorf("registering a waker: prefix %q already has one", prefix)
	}
	r.wakers[prefix] = w
	return nil
}

// Prefixes lists the registered prefixes, sorted.
func (r *Registry) Prefixes() []string {
	r.lock.RLock()
	defer r.lock.RUnlock()
	out := make([]string, 0, len(r.wakers))
	for p := range r.wakers {
		out = append(out, p)
	}
	sort.Strings(out)
	return out
}

// Lookup returns the waker for key and the owner it names: OwnerOf's
// answer, or the matched prefix for keys of another shape.
func (r *Registry) Lookup(key string) (Waker, string, bool) {
	r.lock.RLock()
	defer r.lock.RUnlock()
	best := ""
	for p := range r.wakers {
		if strings.HasPrefix(key, p) && len(p) > len(best) {
			best = p
		}
	}
	if best == "" {
		return nil, "", false
	}
	owner := OwnerOf(key)
	if owner == "" {
		owner = best
	}
	return r.wakers[best], owner, true
}

// Wakes reports whether a settled command with key gets a wake: its key
// names an owner (wf:…, acceptance:…), whose wake waits for a waker when
// none is registered yet, or starts with a registered prefix.
func (r *Registry) Wakes(key string) bool {
	if key == "" {
		return false
	}
	if OwnerOf(key) != "" {
		return true
	}
	_, _, ok := r.Lookup(key)
	return ok
}
