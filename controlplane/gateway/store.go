package gateway

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"

	"github.com/better-compute/commands/controlplane/queue"
)

// stored is what storing one transition came to: the command as it is now,
// whether the transition changed it, and found false for a command that is
// not this node's (nothing will ever land).
type stored struct {
	cur     queue.Command
	changed bool
	found   bool
}

// storeGrouped stores t in a transaction shared with other sessions'
// reports and dispatches (the gateway's group committer) and returns once
// that transaction committed: a report is acknowledged, and a dispatch
// sent, only after it. Thousands of sessions' reports then cost a few
// commits, not one each (BenchmarkSessions' fan-out).
func (s *session) storeGrouped(ctx context.Context, t queue.Transition) (stored, error) {
	var out stored
	err := s.g.group.Do(ctx, func(ctx context.Context, tx pgx.Tx) error {
		var err error
		out, err = s.g.storeTransition(ctx, tx, t)
		return err
	})
	if err != nil {
		// out is not ours to read: a session that gave up may return
		// while the group still runs its function.
		return stored{}, err
	}
	return out, nil
}

// storeTransition is one session's transition inside a group's
// transaction. It is the per-report hook: whatever must commit together
// with a report (a settle's durable wake, an audit row) is written here, on
// tx, where out.changed and out.cur.State.Terminal() say what the report
// did. It may run more than once (a group run again without a failed
// member), so it writes only to tx and returns only what it read.
func (g *Gateway) storeTransition(ctx context.Context, tx pgx.Tx, t queue.Transition) (stored, error) {
	cur, changed, err := g.queue.Transition(ctx, tx, t)
	if errors.Is(err, queue.ErrNotFound) {
		// Not the group's failure: a report for a command this node does
		// not have lands as nothing.
		return stored{}, nil
	}
	if err != nil {
		return stored{}, err
	}
	return stored{cur: cur, changed: changed, found: true}, nil
}
