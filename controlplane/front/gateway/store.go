package gateway

import (
	"context"

	"github.com/better-compute/commands/controlplane/commands/queue"
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
// reports and dispatches (the gateway's group committer), in one statement
// with theirs (queue.TransitionSet, which also runs the module host's
// settle hook for what the statement settled), and returns once that
// transaction committed: a report is acknowledged, and a dispatch sent, only
// after it. Thousands of sessions' reports then cost a few statements and
// commits, not one each (BenchmarkSessions' fan-out).
func (s *session) storeGrouped(ctx context.Context, t queue.Transition) (stored, error) {
	res, err := s.g.transitions.Do(ctx, t)
	if err != nil {
		return stored{}, err
	}
	return stored{cur: res.Command, changed: res.Changed, found: res.Found}, nil
}
