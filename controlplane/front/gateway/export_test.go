package gateway

import (
	"context"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
)

// HoldGroups occupies one of the gateway's group-commit workers until
// release is called: with one worker, every report and dispatch then waits,
// and the next group holds all of them. It returns once the worker is held.
func (g *Gateway) HoldGroups(t *testing.T) (release func()) {
	inside, done := make(chan struct{}), make(chan struct{})
	go func() {
		_ = g.group.Do(context.Background(), func(context.Context, pgx.Tx) error {
			close(inside)
			<-done
			return nil
		})
	}()
	<-inside
	// Released at the latest when the test ends: a held worker keeps a
	// pooled connection, and closing the pool waits for it.
	release = sync.OnceFunc(func() { close(done) })
	t.Cleanup(release)
	return release
}

// GroupWaiting is how many stores wait for a group-commit worker.
func (g *Gateway) GroupWaiting() int { return g.group.Waiting() }

// Ticks is how often the timers of nodeID's sessions on this gateway fired.
func (g *Gateway) Ticks(nodeID string) int64 {
	g.hub.lock.Lock()
	defer g.hub.lock.Unlock()
	var n int64
	for w := range g.hub.sessions[nodeID] {
		n += w.ticks.Load()
	}
	return n
}
