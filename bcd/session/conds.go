package session

import (
	"sort"
	"sync"
	"time"

	"github.com/better-compute/commands/sdk/kind"
)

// ownConditions are the conditions the session client finds itself
// (TrustBundle, ClockSkew, NodeSpec), from what the gateway sent. They are
// kept in memory, not in the state directory: each is found again from the
// next Welcome or Spec, and one persisted across a restart would report a
// gateway's refused frame long after it stopped.
type ownConditions struct {
	// lock guards set.
	lock sync.Mutex
	set  map[string]kind.Condition
}

// put sets c, keeping Since while the status stays; it reports whether the
// condition changed.
func (o *ownConditions) put(c kind.Condition) bool {
	o.lock.Lock()
	defer o.lock.Unlock()
	if o.set == nil {
		o.set = map[string]kind.Condition{}
	}
	old, ok := o.set[c.Type]
	if ok && old.Status == c.Status {
		c.Since = old.Since
	} else {
		c.Since = time.Now().UTC()
	}
	o.set[c.Type] = c
	return !ok || old.Status != c.Status || old.Reason != c.Reason || old.Message != c.Message
}

// list returns the conditions sorted by type.
func (o *ownConditions) list() []kind.Condition {
	o.lock.Lock()
	defer o.lock.Unlock()
	out := make([]kind.Condition, 0, len(o.set))
	for _, c := range o.set {
		out = append(out, c)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Type < out[j].Type })
	return out
}
