package fleetruns

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/better-compute/commands/controlplane/queue"
)

// Hook is the queue's settle hook for fleet runs: in the transaction that
// settles a run's command (a node's report, the sweeper, a cancel, a
// node's deletion), the command's target takes its terminal state and
// reason, and a disruptive run's maintenance lock on the node is given
// back. The settle's own command.settled event wakes the advancer. A
// command of no run costs nothing here.
func (s *Service) Hook(ctx context.Context, tx pgx.Tx, settled []queue.Command) error {
	return SettleHook(ctx, tx, settled)
}

// SettleHook is Hook without a Service: what a process (or a test's own
// queue) that settles commands but runs no fleet-run API installs with
// queue.AlsoOnSettle.
func SettleHook(ctx context.Context, tx pgx.Tx, settled []queue.Command) error {
	var ids, states, reasons, msgs []string
	for _, c := range settled {
		if queue.RunIDOfKey(c.IdempotencyKey) == "" || !c.State.Terminal() {
			continue
		}
		ids, states, reasons, msgs = append(ids, c.ID), append(states, string(c.State)), append(reasons, c.Reason), append(msgs, c.Message)
	}
	if len(ids) == 0 {
		return nil
	}
	if _, err := tx.Exec(ctx, settleTargetsSQL, ids, states, reasons, msgs); err != nil {
		return fmt.Errorf("settling the fleet-run targets of %d command(s): %w", len(ids), err)
	}
	return nil
}

// settleTargetsSQL moves each settled command's target from started to the
// command's terminal state, and gives back the maintenance lock a
// disruptive run took for it (held under the run's id).
const settleTargetsSQL = `
WITH u AS (
  UPDATE fleet_run_targets t SET state = u.st, reason = u.re, message = u.msg, settled_at = now()
  FROM unnest($1::text[], $2::text[], $3::text[], $4::text[]) AS u(id, st, re, msg)
  WHERE t.command_id = u.id AND t.state = 'started'
  RETURNING t.run_id, t.node_id
)
DELETE FROM maintenance_locks m USING u WHERE m.node_id = u.node_id AND m.remediation_id = u.run_id`
