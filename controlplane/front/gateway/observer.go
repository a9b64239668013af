package gateway

import (
	"time"

	"github.com/better-compute/commands/controlplane/commands/queue"
	"github.com/better-compute/commands/sdk/kind"
)

// Observer is told what the gateway does, for the server's metrics. Every
// call is made on a session's goroutine, in memory: no query, no wait.
type Observer interface {
	// Credits says a session's credits in use in lane changed by delta
	// (+1 taken, -1 returned, -n at the session's end).
	Credits(lane kind.Lane, delta int)
	// Dispatched says c was sent to its node for the first time (not a
	// replay); since is how long after it became due: from its created_at,
	// or from its not_before or next_attempt_at when those are later.
	Dispatched(c queue.Command, since time.Duration)
	// Reported says a node's report was stored; c is the command after it
	// and changed whether the report moved it.
	Reported(c queue.Command, changed bool)
}

// nopObserver observes nothing.
type nopObserver struct{}

func (nopObserver) Credits(kind.Lane, int)                  {}
func (nopObserver) Dispatched(queue.Command, time.Duration) {}
func (nopObserver) Reported(queue.Command, bool)            {}

// dueAt is when c became dispatchable: created_at, or a later not_before
// or next_attempt_at.
func dueAt(c queue.Command) time.Time {
	t := c.CreatedAt
	if c.NotBefore != nil && c.NotBefore.After(t) {
		t = *c.NotBefore
	}
	if c.NextAttemptAt != nil && c.NextAttemptAt.After(t) {
		t = *c.NextAttemptAt
	}
	return t
}
