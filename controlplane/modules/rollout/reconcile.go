package rollout

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/better-compute/commands/controlplane/fleet/pools"
	"github.com/better-compute/commands/controlplane/modules"
	"github.com/better-compute/commands/internal/upgrade"
)

// commandTTL is how long a rollout's command may wait for its node.
const commandTTL = time.Hour

// Reconcile starts the next wave of the pool's rollout in one transaction:
// while the rollout runs, every node of the pool that does not run the
// target, has no row in this generation, and whose maintenance lock the
// budget allows, gets a daemon.upgrade. It returns how many it started.
func (m *Module) Reconcile(ctx context.Context, tenantID, pool string) (int, error) {
	started := 0
	err := pgx.BeginFunc(ctx, m.mc.Pool(), func(tx pgx.Tx) error {
		started = 0
		r, err := scanRollout(tx.QueryRow(ctx, `SELECT `+rolloutColumns+` FROM rollouts WHERE tenant_id = $1 AND pool = $2 FOR UPDATE`, tenantID, pool))
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("locking the rollout of %s: %w", pool, err)
		}
		if r.Paused {
			return nil
		}
		rows, err := tx.Query(ctx, `SELECT n.id, coalesce(rn.attempts, 0), coalesce(rn.retry_skipped, false) FROM nodes n
			LEFT JOIN rollout_nodes rn ON rn.node_id = n.id AND rn.generation = $3 AND rn.pool = $2
			WHERE n.tenant_id = $1 AND n.pool = $2 AND n.deleted_at IS NULL AND n.daemon_version <> $4
			  AND (rn.node_id IS NULL OR rn.state = 'pending')
			ORDER BY n.id`, tenantID, pool, r.Generation, r.Version)
		if err != nil {
			return fmt.Errorf("listing the nodes of %s: %w", pool, err)
		}
		type candidate struct {
			id           string
			attempts     int
			retrySkipped bool
		}
		cands, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (candidate, error) {
			var c candidate
			return c, row.Scan(&c.id, &c.attempts, &c.retrySkipped)
		})
		if err != nil {
			return fmt.Errorf("listing the nodes of %s: %w", pool, err)
		}
		for _, cand := range cands {
			payload, err := r.payload(cand.retrySkipped)
			if err != nil {
				return err
			}
			id, attempt := cand.id, cand.attempts+1
			_, wait, err := pools.Acquire(ctx, tx, pools.LockRequest{NodeID: id, TenantID: tenantID, Pool: pool, Holder: Name,
				RemediationID: lockID(r.Generation, id), Action: upgrade.KindName, Reason: "upgrade to " + r.Version})
			if err != nil {
				return err
			}
			if wait != nil {
				if wait.Reason == pools.WaitNodeLocked {
					continue // other work holds this node; try the next
				}
				break // the budget is used: the wave is full
			}
			cmd, _, err := m.mc.Commands().Enqueue(ctx, tx, modules.Command{NodeID: id, Kind: upgrade.KindName, Payload: payload,
				IdempotencyKey: Key(tenantID, pool, r.Generation, id, attempt), NotAfter: time.Now().Add(commandTTL)})
			if err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, `INSERT INTO rollout_nodes (node_id, tenant_id, pool, generation, target_version, state, command_id, attempts, retry_skipped)
				VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
				ON CONFLICT (node_id) DO UPDATE SET tenant_id = $2, pool = $3, generation = $4, target_version = $5, state = $6,
				  command_id = $7, attempts = $8, retry_skipped = $9, reason = '', message = '', updated_at = now()`,
				id, tenantID, pool, r.Generation, r.Version, StateUpgrading, cmd.ID, attempt, cand.retrySkipped); err != nil {
				return fmt.Errorf("recording the upgrade of %s: %w", id, err)
			}
			started++
		}
		return nil
	})
	if err == nil && started > 0 {
		m.logger.Info("started a wave", "tenant_id", tenantID, "pool", pool, "nodes", started)
	}
	return started, err
}

// Run reconciles every running rollout every m.Every, so nodes that join a
// pool, or come back, are upgraded too, and fails the upgrades whose new
// daemon has been silent past the rejoin window (ExpireRejoins).
func (m *Module) Run(ctx context.Context, _ *modules.Context) error {
	t := time.NewTicker(m.Every)
	defer t.Stop()
	for {
		rows, err := m.mc.Pool().Query(ctx, `SELECT tenant_id, pool FROM rollouts WHERE NOT paused`)
		if err != nil {
			return fmt.Errorf("listing rollouts: %w", err)
		}
		type key struct{ tenant, pool string }
		keys, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (key, error) {
			var k key
			return k, r.Scan(&k.tenant, &k.pool)
		})
		if err != nil {
			return fmt.Errorf("listing rollouts: %w", err)
		}
		if _, err := m.ExpireRejoins(ctx); err != nil {
			m.logger.Error("failing upgrades past their rejoin window", "error", err)
		}
		for _, k := range keys {
			if _, err := m.Reconcile(ctx, k.tenant, k.pool); err != nil {
				m.logger.Error("reconciling a rollout", "pool", k.pool, "error", err)
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}
