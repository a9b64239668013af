package remediation

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/better-compute/commands/controlplane/internal/ids"
)

// Plan is what a planner asks for.
type Plan struct {
	NodeID, TenantID, Pool  string
	Action, GPU             string
	Trigger, TriggerMessage string
	// Cooldown keeps the same node, action and GPU from being planned
	// again this long after its last remediation finished.
	Cooldown time.Duration
}

// PlanTx records a waiting remediation in tx unless one is open for the
// same node, action and GPU, one finished within p.Cooldown, or one
// escalated within 7 days (escalated: not tried again); it publishes
// remediation.planned for a new one.
func (e *Engine) PlanTx(ctx context.Context, tx pgx.Tx, p Plan) (string, bool, error) {
	if _, err := tx.Exec(ctx, lockNodeSQL, p.NodeID); err != nil {
		return "", false, fmt.Errorf("planning %s on %s: %w", p.Action, p.NodeID, err)
	}
	var blocked bool
	if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM remediations WHERE node_id = $1 AND action = $2 AND gpu = $3
		AND (state IN ('waiting', 'running', 'verifying')
		  OR (state NOT IN ('superseded', 'cancelled') AND finished_at > now() - $4 * interval '1 microsecond')
		  OR (state = 'escalated' AND finished_at > now() - interval '7 days')))`,
		p.NodeID, p.Action, p.GPU, p.Cooldown.Microseconds()).Scan(&blocked); err != nil {
		return "", false, fmt.Errorf("planning %s on %s: %w", p.Action, p.NodeID, err)
	}
	if blocked {
		return "", false, nil
	}
	id := ids.New(ids.Prefix(e.owner + "-"))
	tag, err := tx.Exec(ctx, `INSERT INTO remediations (id, node_id, tenant_id, pool, owner, action, gpu, trigger, trigger_message)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
		ON CONFLICT (node_id, action, gpu) WHERE state IN ('waiting', 'running', 'verifying') DO NOTHING`,
		id, p.NodeID, p.TenantID, p.Pool, e.owner, p.Action, p.GPU, p.Trigger, p.TriggerMessage)
	if err != nil {
		return "", false, fmt.Errorf("planning %s on %s: %w", p.Action, p.NodeID, err)
	}
	if tag.RowsAffected() == 0 {
		return "", false, nil
	}
	err = e.mc.Event(ctx, tx, p.TenantID, TopicPlanned, map[string]any{"remediationId": id, "nodeId": p.NodeID, "pool": p.Pool,
		"action": p.Action, "gpu": p.GPU, "trigger": p.Trigger, "message": p.TriggerMessage})
	return id, true, err
}

// Supersede ends the open waiting remediations of node whose action is
// action (a reset a reboot supersedes), in tx.
func (e *Engine) Supersede(ctx context.Context, tx pgx.Tx, nodeID, action, by string) (int64, error) {
	tag, err := tx.Exec(ctx, `UPDATE remediations SET state = 'superseded', superseded_by = $3, finished_at = now(), updated_at = now(),
		waiting_reason = '', waiting_message = '', outcome_message = 'superseded by ' || $3
		WHERE node_id = $1 AND action = $2 AND state = 'waiting'`, nodeID, action, by)
	if err != nil {
		return 0, fmt.Errorf("superseding %s on %s: %w", action, nodeID, err)
	}
	return tag.RowsAffected(), nil
}
