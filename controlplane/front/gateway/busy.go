package gateway

import (
	"context"
	"errors"
	"time"

	"github.com/better-compute/commands/controlplane/internal/errcode"
	"github.com/better-compute/commands/internal/backoff"
	agentv1 "github.com/better-compute/commands/proto/bc/agent/v1"
)

// requeueBusy lands a BUSY refusal: "the gateway puts the command back to
// pending with a backoff from 1 to 30 seconds", and the credit comes back
// once that is stored. The backoff grows with the command's dispatches,
// which the session knows from its credit, so landing BUSY is one write;
// until the write succeeds the command keeps its credit and stays
// dispatched, and the report is held and retried (never acknowledged and
// forgotten, which left the command to the sweeper).
func (s *session) requeueBusy(ctx context.Context, u *agentv1.CommandUpdate) (outcome, error) {
	attempts := 1
	if cr, ok := s.outstanding[u.GetCommandId()]; ok {
		attempts = cr.attempts
	}
	backoff := BusyBackoff(attempts, s.g.opts.BusyBackoffMin, s.g.opts.BusyBackoffMax)
	_, _, err := s.g.queue.Requeue(ctx, s.g.pool, s.id.NodeID, u.GetCommandId(), s.epoch, backoff)
	if errors.Is(err, errcode.ErrNotFound) {
		return landed, nil // not this node's command
	}
	if err != nil {
		return s.landErr(ctx, "requeueing a BUSY command", u, err)
	}
	s.g.outage.OK()
	// Requeued, or already moved on (settled, running, fenced): either way
	// this session no longer holds it.
	s.releaseCredit(u.GetCommandId())
	return landed, nil
}

// BusyBackoff is BUSY's backoff: exponential from min to max over the
// command's attempts (kept in PostgreSQL, so any gateway continues it),
// with internal/backoff's jitter.
func BusyBackoff(attempts int, min, max time.Duration) time.Duration {
	return backoff.Nth(min, max, attempts)
}
