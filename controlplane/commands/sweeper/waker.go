package sweeper

import (
	"context"
	"strings"
	"sync"
)

// Waker is woken when a command of the thing it controls settles: a node
// controller by node id, a workflow by workflow id.
type Waker interface {
	Wake(ctx context.Context, id string)
}

// WakerFunc adapts a function to a Waker.
type WakerFunc func(ctx context.Context, id string)

// Wake calls f.
func (f WakerFunc) Wake(ctx context.Context, id string) { f(ctx, id) }

// Wakers is a registry of wakers, all woken for every id. Modules register
// theirs at start (the node controller, the workflow engine) and unregister
// on stop.
type Wakers struct {
	// lock guards wakers.
	lock   sync.RWMutex
	wakers map[*Waker]struct{}
}

// Register adds w and returns the function that removes it.
func (r *Wakers) Register(w Waker) (unregister func()) {
	r.lock.Lock()
	defer r.lock.Unlock()
	if r.wakers == nil {
		r.wakers = map[*Waker]struct{}{}
	}
	key := &w
	r.wakers[key] = struct{}{}
	return func() {
		r.lock.Lock()
		defer r.lock.Unlock()
		delete(r.wakers, key)
	}
}

// Wake wakes every registered waker with id. A nil registry wakes nothing.
func (r *Wakers) Wake(ctx context.Context, id string) {
	if r == nil || id == "" {
		return
	}
	r.lock.RLock()
	ws := make([]Waker, 0, len(r.wakers))
	for w := range r.wakers {
		ws = append(ws, *w)
	}
	r.lock.RUnlock()
	for _, w := range ws {
		w.Wake(ctx, id)
	}
}

// WorkflowOf returns the workflow named by an idempotency key
// ("wf:<workflowId>:<stepId>"), or "" for any other key.
func WorkflowOf(idempotencyKey string) string {
	rest, ok := strings.CutPrefix(idempotencyKey, "wf:")
	if !ok {
		return ""
	}
	id, _, ok := strings.Cut(rest, ":")
	if !ok {
		return ""
	}
	return id
}
