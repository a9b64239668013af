package rollout

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/better-compute/commands/controlplane/commands/wakes"
	"github.com/better-compute/commands/controlplane/fleet/pools"
	"github.com/better-compute/commands/controlplane/modules"
	"github.com/better-compute/commands/internal/upgrade"
)

// outcome is what a node's upgrade came to, from its command and the
// reports stored beside it.
type outcome struct {
	// state is the node's state; "" when the command never ran (cancelled
	// or expired): the node is pending again.
	state, reason, message string
}

// outcomeOf reads c's outcome. The command keeps its first terminal state,
// but a contradicting report the node sent later (modules.Contradiction) is
// the news: a rollback reported after the command was settled otherwise
// is a rollback, and a success reported after it failed or was cancelled
// is an upgrade.
func outcomeOf(c modules.StoredCommand, xs []modules.Contradiction) outcome {
	var o outcome
	switch {
	case c.State == modules.StateSucceeded:
		o = outcome{state: StateUpgraded, reason: c.Reason, message: c.Message}
	case c.State == modules.StateFailed && c.Reason == upgrade.ReasonRolledBack:
		o = outcome{state: StateRolledBack, reason: c.Reason, message: c.Message}
	case c.State == modules.StateCancelled || c.State == modules.StateExpired:
		o = outcome{}
	default:
		o = outcome{state: StateFailed, reason: c.Reason, message: c.Message}
	}
	for _, x := range xs {
		late := fmt.Sprintf(" (reported after the command was stored %s", x.StoredState)
		if x.StoredReason != "" {
			late += " " + x.StoredReason
		}
		late += ")"
		switch {
		case x.ReportedState == modules.StateFailed && x.ReportedReason == upgrade.ReasonRolledBack:
			return outcome{state: StateRolledBack, reason: x.ReportedReason, message: x.ReportedMessage + late}
		case x.ReportedState == modules.StateSucceeded && o.state != StateUpgraded:
			o = outcome{state: StateUpgraded, reason: x.ReportedReason, message: x.ReportedMessage + late}
		}
	}
	return o
}

func failed(state string) bool { return state == StateFailed || state == StateRolledBack }

// Wake settles a node's upgrade from its command (and any report stored
// beside it): upgraded, rolled-back or failed, and gives back the node's
// maintenance lock. A rollback pauses the rollout (the wave stops: its
// pending commands are cancelled); any other failure counts towards
// maxFailures, which pauses it the same way. A command that never ran
// leaves the node pending. Then the next wave starts. It is idempotent: a
// repeated wake changes nothing more; a later wake for a contradicting
// report moves the node on (an upgraded node that the node says rolled
// back becomes rolled-back and pauses the rollout).
func (m *Module) Wake(ctx context.Context, w wakes.Wake) error {
	tenantID, pool, gen, nodeID, ok := parseKey(w.Key)
	if !ok {
		m.logger.Warn("a wake for a key that is not a rollout's", "key", w.Key)
		return nil
	}
	err := pgx.BeginFunc(ctx, m.mc.Pool(), func(tx pgx.Tx) error {
		// The rollout's row first: every settle of the pool takes turns
		// behind it, so the failure count holds.
		r, err := scanRollout(tx.QueryRow(ctx, `SELECT `+rolloutColumns+` FROM rollouts WHERE tenant_id = $1 AND pool = $2 FOR UPDATE`, tenantID, pool))
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("locking the rollout of %s: %w", pool, err)
		}
		c, err := m.mc.Commands().Get(ctx, tx, nodeID, w.CommandID)
		if err != nil {
			return err
		}
		xs, err := m.mc.Commands().Contradictions(ctx, tx, c.ID)
		if err != nil {
			return err
		}
		o := outcomeOf(c, xs)
		var prev string
		err = tx.QueryRow(ctx, `SELECT state FROM rollout_nodes WHERE node_id = $1 AND generation = $2 AND command_id = $3 FOR UPDATE`,
			nodeID, gen, c.ID).Scan(&prev)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil // another generation's, or a retry replaced it
		}
		if err != nil {
			return fmt.Errorf("reading the upgrade of %s: %w", nodeID, err)
		}
		if _, err := pools.Release(ctx, tx, nodeID, lockID(gen, nodeID)); err != nil {
			return err
		}
		if o.state == "" {
			// Never ran: the node is pending again (a later wave).
			_, err := tx.Exec(ctx, `UPDATE rollout_nodes SET state = 'pending', updated_at = now()
				WHERE node_id = $1 AND generation = $2 AND command_id = $3 AND state = 'upgrading'`, nodeID, gen, c.ID)
			return err
		}
		if prev == o.state || prev == StatePending {
			return nil
		}
		if _, err := tx.Exec(ctx, `UPDATE rollout_nodes SET state = $4, reason = $5, message = $6, updated_at = now()
			WHERE node_id = $1 AND generation = $2 AND command_id = $3`, nodeID, gen, c.ID, o.state, o.reason, o.message); err != nil {
			return fmt.Errorf("recording the outcome of %s: %w", nodeID, err)
		}
		if gen != r.Generation || !failed(o.state) {
			return nil
		}
		if !failed(prev) {
			r.Failures++
			if _, err := tx.Exec(ctx, `UPDATE rollouts SET failures = $3, updated_at = now() WHERE tenant_id = $1 AND pool = $2`,
				tenantID, pool, r.Failures); err != nil {
				return fmt.Errorf("counting the failures of %s: %w", pool, err)
			}
		}
		switch {
		case o.state == StateRolledBack:
			return m.stopWave(ctx, tx, r, fmt.Sprintf("node %s rolled back from %s (%s): %s", nodeID, r.Version, o.reason, o.message))
		case r.Failures >= r.MaxFailures && !r.Paused:
			return m.stopWave(ctx, tx, r, fmt.Sprintf("node %s failed the upgrade to %s (%s): %s; %d failure(s) reached maxFailures %d",
				nodeID, r.Version, o.reason, o.message, r.Failures, r.MaxFailures))
		}
		return nil
	})
	if err != nil {
		return err
	}
	_, err = m.Reconcile(ctx, tenantID, pool)
	return err
}

// stopWave pauses the rollout (its row locked by the caller) and cancels
// its commands that are still pending; the in-flight ones finish and
// report.
func (m *Module) stopWave(ctx context.Context, tx pgx.Tx, r Rollout, reason string) error {
	if _, err := Pause(ctx, tx, r.TenantID, r.Pool, reason); err != nil {
		return err
	}
	m.logger.Warn("rollout paused", "tenant_id", r.TenantID, "pool", r.Pool, "reason", reason)
	rows, err := tx.Query(ctx, `SELECT command_id FROM rollout_nodes WHERE tenant_id = $1 AND pool = $2 AND generation = $3 AND state = 'upgrading'`,
		r.TenantID, r.Pool, r.Generation)
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
		if c.State == modules.StateCancelled {
			if _, err := tx.Exec(ctx, `UPDATE rollout_nodes SET state = 'pending', updated_at = now() WHERE command_id = $1`, id); err != nil {
				return err
			}
			if _, err := pools.Release(ctx, tx, c.NodeID, lockID(r.Generation, c.NodeID)); err != nil {
				return err
			}
		}
	}
	return nil
}
