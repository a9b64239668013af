package rollout

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/better-compute/commands/controlplane/internal/errcode"
)

// Retry makes the nodes of the pool's current generation that failed or
// rolled back (or only nodeID, when set) pending again, clears the failure
// count and resumes the rollout; the next pass sends each a new command
// (its attempt counted in the key), a node that rolled back with
// retrySkipped, since it refuses its skipped target otherwise. A nodeID
// that did not fail in this generation is refused, named.
func Retry(ctx context.Context, tx pgx.Tx, tenantID, pool, nodeID, by string) (Rollout, int, error) {
	r, err := scanRollout(tx.QueryRow(ctx, `SELECT `+rolloutColumns+` FROM rollouts WHERE tenant_id = $1 AND pool = $2 FOR UPDATE`, tenantID, pool))
	if errors.Is(err, pgx.ErrNoRows) {
		return Rollout{}, 0, notFound(tenantID, pool)
	}
	if err != nil {
		return Rollout{}, 0, fmt.Errorf("locking the rollout of %s: %w", pool, err)
	}
	n, err := retryNodes(ctx, tx, r, nodeID)
	if err != nil {
		return Rollout{}, 0, err
	}
	if nodeID != "" && n == 0 {
		return Rollout{}, 0, &errcode.Error{Code: errcode.InvalidState, Reason: "rollout-node-not-failed",
			Message: fmt.Sprintf("node %s has not failed or rolled back in the rollout of %s to %s (generation %d): nothing to retry", nodeID, pool, r.Version, r.Generation),
			Details: map[string]string{"nodeId": nodeID, "pool": pool}}
	}
	r, err = scanRollout(tx.QueryRow(ctx, `UPDATE rollouts SET paused = false, paused_reason = '', failures = 0, updated_at = now()
		WHERE tenant_id = $1 AND pool = $2 RETURNING `+rolloutColumns, tenantID, pool))
	if err != nil {
		return Rollout{}, 0, fmt.Errorf("resuming the rollout of %s: %w", pool, err)
	}
	return r, n, writeEvent(ctx, tx, tenantID, TopicRetried, map[string]any{"pool": pool, "version": r.Version, "nodes": n, "nodeId": nodeID, "by": by})
}

// retryNodes makes r's failed and rolled-back nodes (or nodeID alone)
// pending again and returns how many.
func retryNodes(ctx context.Context, tx pgx.Tx, r Rollout, nodeID string) (int, error) {
	tag, err := tx.Exec(ctx, `UPDATE rollout_nodes SET state = 'pending', retry_skipped = (state = 'rolled-back'), updated_at = now()
		WHERE tenant_id = $1 AND pool = $2 AND generation = $3 AND state IN ('failed', 'rolled-back') AND ($4 = '' OR node_id = $4)`,
		r.TenantID, r.Pool, r.Generation, nodeID)
	if err != nil {
		return 0, fmt.Errorf("retrying the failed nodes of %s: %w", r.Pool, err)
	}
	return int(tag.RowsAffected()), nil
}
