package pools

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/better-compute/commands/controlplane/commands/events"
	"github.com/better-compute/commands/controlplane/internal/store"
)

// Why a lock could not be taken: the waiting reasons the reconciler's plan
// shows.
const (
	WaitNodeLocked       = "node-locked"
	WaitBudgetConcurrent = "budget-concurrent"
	WaitBudgetWindow     = "budget-window"
	WaitBreakerOpen      = "breaker-open"
)

// Lock is one node's maintenance lock.
type Lock struct {
	NodeID, TenantID, Pool string
	// Holder is the module that holds it (provision, health).
	Holder string
	// RemediationID and Action are the work it is held for.
	RemediationID, Action, Reason string
	AcquiredAt                    time.Time
}

// LockRequest asks for a node's lock.
type LockRequest struct {
	NodeID, TenantID, Pool        string
	Holder, RemediationID, Action string
	Reason                        string
}

// Wait says why a lock was not taken: a reason code (Wait…) and the words,
// naming the budget.
type Wait struct {
	Reason, Message string
}

// Acquire takes the node's maintenance lock in tx within the pool's budget.
// It first locks the pool's row, so acquisitions in one pool take turns;
// then it refuses, with a Wait, a pool whose breaker is open, a node
// locked by other work, a pool with MaxConcurrent nodes in maintenance and
// a pool that started MaxPerWindow within its window (counting the
// remediations whose started_at falls in it: the caller sets its own in
// the same transaction). The same remediation acquiring again gets its
// lock back.
func Acquire(ctx context.Context, tx pgx.Tx, r LockRequest) (Lock, *Wait, error) {
	b, err := lockPool(ctx, tx, r.TenantID, r.Pool)
	if err != nil {
		return Lock{}, nil, err
	}
	if held, err := getLock(ctx, tx, r.NodeID); err == nil {
		if held.RemediationID == r.RemediationID {
			return held, nil, nil
		}
		return Lock{}, &Wait{Reason: WaitNodeLocked, Message: fmt.Sprintf("node %s is locked by %s for %s (%s) since %s",
			r.NodeID, held.Holder, held.Action, held.RemediationID, held.AcquiredAt.UTC().Format(time.RFC3339))}, nil
	} else if !errors.Is(err, pgx.ErrNoRows) {
		return Lock{}, nil, err
	}
	if b.BreakerTrippedAt != nil {
		return Lock{}, &Wait{Reason: WaitBreakerOpen, Message: fmt.Sprintf("pool %s's breaker is open since %s (%s): no remediation runs until an operator resets it (better-compute pools reset-breaker %s)",
			r.Pool, b.BreakerTrippedAt.UTC().Format(time.RFC3339), b.BreakerReason, r.Pool)}, nil
	}
	var inMaint, started int
	// The window counts the remediations started in it and the nodes that
	// disruptive fleet runs started in it: one budget for both.
	if err := tx.QueryRow(ctx, `SELECT
		(SELECT count(*) FROM maintenance_locks WHERE tenant_id = $1 AND pool = $2),
		(SELECT count(*) FROM remediations WHERE tenant_id = $1 AND pool = $2 AND started_at > now() - $3 * interval '1 second')
		+ (SELECT count(*) FROM fleet_run_targets t JOIN fleet_runs r ON r.id = t.run_id
		   WHERE r.tenant_id = $1 AND r.disruptive AND t.pool = $2 AND t.started_at > now() - $3 * interval '1 second')`,
		r.TenantID, r.Pool, int(b.Window/time.Second)).Scan(&inMaint, &started); err != nil {
		return Lock{}, nil, fmt.Errorf("reading the budget use of pool %s: %w", r.Pool, err)
	}
	if inMaint >= b.MaxConcurrent {
		return Lock{}, &Wait{Reason: WaitBudgetConcurrent, Message: fmt.Sprintf("pool %s has %d of %d node(s) in disruptive maintenance (budget maxConcurrent %d)",
			r.Pool, inMaint, b.MaxConcurrent, b.MaxConcurrent)}, nil
	}
	if b.MaxPerWindow > 0 && started >= b.MaxPerWindow {
		return Lock{}, &Wait{Reason: WaitBudgetWindow, Message: fmt.Sprintf("pool %s started %d of %d remediation(s) in the last %s (budget maxPerWindow %d per %s)",
			r.Pool, started, b.MaxPerWindow, b.Window, b.MaxPerWindow, b.Window)}, nil
	}
	l := Lock{NodeID: r.NodeID, TenantID: r.TenantID, Pool: r.Pool, Holder: r.Holder, RemediationID: r.RemediationID, Action: r.Action, Reason: r.Reason}
	err = tx.QueryRow(ctx, `INSERT INTO maintenance_locks (node_id, tenant_id, pool, holder, remediation_id, action, reason)
		VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING acquired_at`, l.NodeID, l.TenantID, l.Pool, l.Holder, l.RemediationID, l.Action, l.Reason).Scan(&l.AcquiredAt)
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "23505" {
		return Lock{}, &Wait{Reason: WaitNodeLocked, Message: "node " + r.NodeID + " was locked by other work just now"}, nil
	}
	if err != nil {
		return Lock{}, nil, fmt.Errorf("locking node %s: %w", r.NodeID, err)
	}
	return l, nil, nil
}

// Release gives back the node's lock held for remediationID, in tx; a lock
// held for other work stays.
func Release(ctx context.Context, tx pgx.Tx, nodeID, remediationID string) (bool, error) {
	tag, err := tx.Exec(ctx, `DELETE FROM maintenance_locks WHERE node_id = $1 AND remediation_id = $2`, nodeID, remediationID)
	if err != nil {
		return false, fmt.Errorf("releasing the lock of %s: %w", nodeID, err)
	}
	return tag.RowsAffected() > 0, nil
}

func getLock(ctx context.Context, db store.DBTX, nodeID string) (Lock, error) {
	var l Lock
	err := db.QueryRow(ctx, `SELECT node_id, tenant_id, pool, holder, remediation_id, action, reason, acquired_at FROM maintenance_locks WHERE node_id = $1`, nodeID).
		Scan(&l.NodeID, &l.TenantID, &l.Pool, &l.Holder, &l.RemediationID, &l.Action, &l.Reason, &l.AcquiredAt)
	return l, err
}

// ListLocks returns the tenant's maintenance locks, of one pool when pool
// is set, oldest first.
func ListLocks(ctx context.Context, db store.DBTX, tenantID, pool string) ([]Lock, error) {
	rows, err := db.Query(ctx, `SELECT node_id, tenant_id, pool, holder, remediation_id, action, reason, acquired_at FROM maintenance_locks
		WHERE tenant_id = $1 AND ($2 = '' OR pool = $2) ORDER BY acquired_at, node_id`, tenantID, pool)
	if err != nil {
		return nil, fmt.Errorf("listing maintenance locks: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Lock, error) {
		var l Lock
		err := r.Scan(&l.NodeID, &l.TenantID, &l.Pool, &l.Holder, &l.RemediationID, &l.Action, &l.Reason, &l.AcquiredAt)
		return l, err
	})
	if err != nil {
		return nil, fmt.Errorf("listing maintenance locks: %w", err)
	}
	return out, nil
}

// Trip opens the pool's breaker in tx unless it is open already, and
// publishes pool.breaker.tripped (the alert) when it opened it.
func Trip(ctx context.Context, tx pgx.Tx, tenantID, pool, reason string) (bool, error) {
	if _, err := lockPool(ctx, tx, tenantID, pool); err != nil {
		return false, err
	}
	tag, err := tx.Exec(ctx, `UPDATE pools SET breaker_tripped_at = now(), breaker_reason = $3, updated_at = now()
		WHERE tenant_id = $1 AND name = $2 AND breaker_tripped_at IS NULL`, tenantID, pool, reason)
	if err != nil {
		return false, fmt.Errorf("tripping the breaker of pool %s: %w", pool, err)
	}
	if tag.RowsAffected() == 0 {
		return false, nil
	}
	return true, events.Write(ctx, tx, tenantID, TopicBreakerTripped, map[string]any{"pool": pool, "reason": reason, "severity": "alert"})
}

// ResetBreaker closes the pool's breaker in tx and publishes
// pool.breaker.reset with who reset it. Failures before the reset no longer
// count towards tripping it again.
func ResetBreaker(ctx context.Context, tx pgx.Tx, tenantID, pool, by string) (Budget, error) {
	b, err := lockPool(ctx, tx, tenantID, pool)
	if err != nil {
		return Budget{}, err
	}
	if b.BreakerTrippedAt == nil {
		return b, nil
	}
	b, err = scanBudget(tx.QueryRow(ctx, `UPDATE pools SET breaker_tripped_at = NULL, breaker_reason = '', breaker_reset_at = now(), updated_at = now()
		WHERE tenant_id = $1 AND name = $2 RETURNING `+budgetColumns, tenantID, pool))
	if err != nil {
		return Budget{}, fmt.Errorf("resetting the breaker of pool %s: %w", pool, err)
	}
	return b, events.Write(ctx, tx, tenantID, TopicBreakerReset, map[string]any{"pool": pool, "by": by})
}
