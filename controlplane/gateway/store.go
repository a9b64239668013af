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
// reports and dispatches (the gateway's group committer), its statement
// pipelined with theirs, and returns once that transaction committed: a
// report is acknowledged, and a dispatch sent, only after it. Thousands of
// sessions' reports then cost a few commits and round trips, not one each
// (BenchmarkSessions' fan-out).
func (s *session) storeGrouped(ctx context.Context, t queue.Transition) (stored, error) {
	if t.To.Terminal() && s.g.queue.HasSettleHook() {
		// The module host's settle hook (durable owner wakes) is Go that
		// runs in the settling transaction: a pipelined batch cannot run
		// it, so a settling report takes the group's transaction path,
		// where queue.Transition calls the hook. Dispatches, acks and
		// progress stay pipelined.
		var out stored
		err := s.g.group.Do(ctx, func(ctx context.Context, tx pgx.Tx) error {
			cur, changed, err := s.g.queue.Transition(ctx, tx, t)
			if errors.Is(err, queue.ErrNotFound) {
				out = stored{}
				return nil
			}
			if err != nil {
				return err
			}
			out = stored{cur: cur, changed: changed, found: true}
			return nil
		})
		if err != nil {
			return stored{}, err
		}
		return out, nil
	}
	var res queue.TransitionResult
	var qerr error
	err := s.g.group.DoBatch(ctx, func(b *pgx.Batch) {
		qerr = s.g.queueTransition(b, t, &res)
	})
	if err == nil {
		err = qerr
	}
	if err != nil {
		// res is not ours to read: a session that gave up may return
		// while the group still runs.
		return stored{}, err
	}
	return stored{cur: res.Command, changed: res.Changed, found: res.Found}, nil
}

// queueTransition queues one session's transition on the group's batch.
// It is the per-report hook: whatever must commit together with a report
// (a settle's durable wake, an audit row) is queued here on b, after the
// transition, as SQL that decides for itself whether it applies (say,
// INSERT ... SELECT ... FROM commands WHERE id = $1 AND settled_at =
// now(), true only in the transaction that settled it); its failure fails
// this report alone. A hook that needs Go between statements uses
// s.g.group.Do with a pgx.Tx instead, at a round trip per statement.
func (g *Gateway) queueTransition(b *pgx.Batch, t queue.Transition, out *queue.TransitionResult) error {
	return g.queue.QueueTransition(b, t, out)
}
