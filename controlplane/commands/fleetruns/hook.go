package fleetruns

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/better-compute/commands/controlplane/commands/queue"
)

// SettleHook is the queue's settle hook for fleet runs (install it with
// queue.AlsoOnSettle in every process that settles commands): in the
// transaction that settles a run's command (a node's report, the sweeper,
// a cancel, a node's deletion), the command's target takes its terminal
// state and reason, and a disruptive run's maintenance lock on the node is
// given back. The settle's own command.settled event wakes the advancer. A
// command of no run costs nothing here.
func SettleHook(ctx context.Context, tx pgx.Tx, settled []queue.Command) error {
	var ids []string
	for _, c := range settled {
		if queue.RunIDOfKey(c.IdempotencyKey) != "" && c.State.Terminal() {
			ids = append(ids, c.ID)
		}
	}
	if len(ids) == 0 {
		return nil
	}
	if _, err := tx.Exec(ctx, settleTargetsSQL("t.command_id = ANY ($1::text[])"), ids); err != nil {
		return fmt.Errorf("settling the fleet-run targets of %d command(s): %w", len(ids), err)
	}
	return nil
}

// settleTargetsSQL moves the started targets that where selects, whose
// commands settled, to their commands' terminal states, and gives back the
// maintenance locks their runs held for them. The settle hook selects the
// commands it was told of (the transaction sees its own settle); each pass
// of the advancer selects its run's, catching up a settle the hook did not
// see (a replica of an older release settled the command).
func settleTargetsSQL(where string) string {
	return `
WITH u AS (
  UPDATE fleet_run_targets t SET state = c.state, reason = c.reason, message = c.message, settled_at = c.settled_at
  FROM commands c
  WHERE ` + where + ` AND t.state = 'started' AND c.id = t.command_id AND c.settled_at IS NOT NULL
  RETURNING t.run_id, t.node_id
)
DELETE FROM maintenance_locks m USING u WHERE m.node_id = u.node_id AND m.remediation_id = u.run_id`
}
