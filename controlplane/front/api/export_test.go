package api

import (
	"context"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
)

// HoldRunGroup occupies one of commands.run's group-commit workers until
// release is called (at the latest when the test ends): with one worker,
// every caller then waits, and the next group holds all of them.
func (s *Server) HoldRunGroup(t *testing.T) (release func()) {
	inside, done := make(chan struct{}), make(chan struct{})
	go func() {
		_ = s.group.Do(context.Background(), func(context.Context, pgx.Tx) error {
			close(inside)
			<-done
			return nil
		})
	}()
	<-inside
	release = sync.OnceFunc(func() { close(done) })
	t.Cleanup(release)
	return release
}

// RunGroupWaiting is how many commands.run callers wait for a worker.
func (s *Server) RunGroupWaiting() int { return s.group.Waiting() }

// Fail is the API's error mapping, for tests of it alone.
func (s *Server) Fail(ctx context.Context, op string, err error) error { return s.fail(ctx, op, err) }
