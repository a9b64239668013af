package rollout

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/better-compute/commands/controlplane/modules"
	"github.com/better-compute/commands/controlplane/pools"
	"github.com/better-compute/commands/controlplane/queue"
	"github.com/better-compute/commands/controlplane/wakes"
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
		rows, err := tx.Query(ctx, `SELECT n.id, coalesce(rn.attempts, 0) FROM nodes n
			LEFT JOIN rollout_nodes rn ON rn.node_id = n.id AND rn.generation = $3 AND rn.pool = $2
			WHERE n.tenant_id = $1 AND n.pool = $2 AND n.deleted_at IS NULL AND n.daemon_version <> $4
			  AND (rn.node_id IS NULL OR rn.state = 'pending')
			ORDER BY n.id`, tenantID, pool, r.Generation, r.Version)
		if err != nil {
			return fmt.Errorf("listing the nodes of %s: %w", pool, err)
		}
		type candidate struct {
			id       string
			attempts int
		}
		cands, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (candidate, error) {
			var c candidate
			return c, row.Scan(&c.id, &c.attempts)
		})
		if err != nil {
			return fmt.Errorf("listing the nodes of %s: %w", pool, err)
		}
		payload, err := r.payload()
		if err != nil {
			return err
		}
		for _, cand := range cands {
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
			if _, err := tx.Exec(ctx, `INSERT INTO rollout_nodes (node_id, tenant_id, pool, generation, target_version, state, command_id, attempts)
				VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
				ON CONFLICT (node_id) DO UPDATE SET tenant_id = $2, pool = $3, generation = $4, target_version = $5, state = $6,
				  command_id = $7, attempts = $8, reason = '', message = '', updated_at = now()`,
				id, tenantID, pool, r.Generation, r.Version, StateUpgrading, cmd.ID, attempt); err != nil {
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

// Wake settles a node's upgrade: succeeded is upgraded, a rollback pauses
// the rollout (the wave stops: its pending commands are cancelled), any
// other failure is failed; each gives back the node's maintenance lock.
// Then the next wave starts. It is idempotent: a repeated wake changes
// nothing more.
func (m *Module) Wake(ctx context.Context, w wakes.Wake) error {
	tenantID, pool, gen, nodeID, ok := parseKey(w.Key)
	if !ok {
		m.logger.Warn("a wake for a key that is not a rollout's", "key", w.Key)
		return nil
	}
	err := pgx.BeginFunc(ctx, m.mc.Pool(), func(tx pgx.Tx) error {
		c, err := m.mc.Queue().Get(ctx, tx, nodeID, w.CommandID)
		if err != nil {
			return err
		}
		state, pause := StateFailed, false
		switch {
		case c.State == queue.Succeeded:
			state = StateUpgraded
		case c.State == queue.Failed && c.Reason == upgrade.ReasonRolledBack:
			state, pause = StateRolledBack, true
		case c.State == queue.Cancelled || c.State == queue.Expired:
			// Never ran: the node is pending again (a later wave).
			if _, err := tx.Exec(ctx, `UPDATE rollout_nodes SET state = 'pending', updated_at = now() WHERE node_id = $1 AND generation = $2 AND command_id = $3`, nodeID, gen, c.ID); err != nil {
				return err
			}
			_, err := pools.Release(ctx, tx, nodeID, lockID(gen, nodeID))
			return err
		}
		tag, err := tx.Exec(ctx, `UPDATE rollout_nodes SET state = $4, reason = $5, message = $6, updated_at = now()
			WHERE node_id = $1 AND generation = $2 AND command_id = $3 AND state = 'upgrading'`, nodeID, gen, c.ID, state, c.Reason, c.Message)
		if err != nil {
			return fmt.Errorf("recording the outcome of %s: %w", nodeID, err)
		}
		if _, err := pools.Release(ctx, tx, nodeID, lockID(gen, nodeID)); err != nil {
			return err
		}
		if tag.RowsAffected() == 0 || !pause {
			return nil
		}
		return m.stopWave(ctx, tx, tenantID, pool, gen, fmt.Sprintf("node %s rolled back from %s: %s", nodeID, c.Kind, c.Message))
	})
	if err != nil {
		return err
	}
	_, err = m.Reconcile(ctx, tenantID, pool)
	return err
}

// stopWave pauses the rollout and cancels its commands that are still
// pending; the in-flight ones finish and report.
func (m *Module) stopWave(ctx context.Context, tx pgx.Tx, tenantID, pool string, gen int64, reason string) error {
	if _, err := tx.Exec(ctx, `SELECT 1 FROM rollouts WHERE tenant_id = $1 AND pool = $2 FOR UPDATE`, tenantID, pool); err != nil {
		return err
	}
	if _, err := Pause(ctx, tx, tenantID, pool, reason); err != nil {
		return err
	}
	m.logger.Warn("rollout paused", "tenant_id", tenantID, "pool", pool, "reason", reason)
	rows, err := tx.Query(ctx, `SELECT command_id FROM rollout_nodes WHERE tenant_id = $1 AND pool = $2 AND generation = $3 AND state = 'upgrading'`, tenantID, pool, gen)
	if err != nil {
		return err
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return err
	}
	for _, id := range ids {
		c, err := m.mc.Commands().Cancel(ctx, tx, id)
		if err != nil {
			return err
		}
		if c.State == queue.Cancelled {
			if _, err := tx.Exec(ctx, `UPDATE rollout_nodes SET state = 'pending', updated_at = now() WHERE command_id = $1`, id); err != nil {
				return err
			}
			if _, err := pools.Release(ctx, tx, c.NodeID, lockID(gen, c.NodeID)); err != nil {
				return err
			}
		}
	}
	return nil
}

// Run reconciles every running rollout every m.Every, so nodes that join a
// pool, or come back, are upgraded too.
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
