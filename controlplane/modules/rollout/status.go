package rollout

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/better-compute/commands/controlplane/internal/store"
)

// NodeStatus is one node of a rollout as `better-compute rollout status`
// shows it: its current version (its last Hello's), the target, its state.
type NodeStatus struct {
	NodeID    string
	Current   string
	Target    string
	State     string
	CommandID string
	Reason    string
	Message   string
	// Attempts counts the node's commands in this generation.
	Attempts  int
	UpdatedAt *time.Time
}

// PoolStatus is a pool's rollout and its nodes.
type PoolStatus struct {
	Rollout
	Nodes []NodeStatus
}

// Status returns the pool's rollout and every node of the pool: pending
// (no row in this generation and not on the target), upgrading, upgraded
// (including a node already on the target), rolled-back or failed.
func Status(ctx context.Context, db store.DBTX, tenantID, pool string) (PoolStatus, error) {
	r, err := Get(ctx, db, tenantID, pool)
	if err != nil {
		return PoolStatus{}, err
	}
	rows, err := db.Query(ctx, `SELECT n.id, n.daemon_version, coalesce(rn.state, ''), coalesce(rn.command_id, ''), coalesce(rn.reason, ''),
		coalesce(rn.message, ''), coalesce(rn.attempts, 0), rn.updated_at
		FROM nodes n LEFT JOIN rollout_nodes rn ON rn.node_id = n.id AND rn.generation = $3 AND rn.pool = $2
		WHERE n.tenant_id = $1 AND n.pool = $2 AND n.deleted_at IS NULL ORDER BY n.id`, tenantID, pool, r.Generation)
	if err != nil {
		return PoolStatus{}, fmt.Errorf("reading the rollout of %s: %w", pool, err)
	}
	nodes, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (NodeStatus, error) {
		n := NodeStatus{Target: r.Version}
		err := row.Scan(&n.NodeID, &n.Current, &n.State, &n.CommandID, &n.Reason, &n.Message, &n.Attempts, &n.UpdatedAt)
		switch {
		case n.State == "" && n.Current == r.Version:
			n.State = StateUpgraded
		case n.State == "":
			n.State = StatePending
		}
		return n, err
	})
	if err != nil {
		return PoolStatus{}, fmt.Errorf("reading the rollout of %s: %w", pool, err)
	}
	return PoolStatus{Rollout: r, Nodes: nodes}, nil
}
