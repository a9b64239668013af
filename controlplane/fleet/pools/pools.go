// Package pools holds the pools of a tenant's nodes and their disruption
// budgets, and the per-node maintenance locks that keep two remediations
// off one node. "Nodes carry a pool (a label set at create or join). Each
// pool has a disruption budget: how many nodes may be in disruptive
// maintenance at once, and how many per time window. A per-node maintenance
// lock row keeps two remediations off one node."
//
// A lock is taken (Acquire) in the transaction that starts a remediation,
// after the pool's row is locked, so two acquisitions in one pool take
// turns and the budget holds across replicas. The pool's maintenance in
// progress is its lock rows; the starts of the window are the remediations
// whose started_at falls in it. The pool's breaker, once tripped, stops all
// remediation in it until an operator resets it.
package pools

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/better-compute/commands/controlplane/commands/events"
	"github.com/better-compute/commands/controlplane/internal/errcode"
	"github.com/better-compute/commands/controlplane/internal/store"
	"github.com/better-compute/commands/internal/names"
)

// DefaultPool is the pool of a node created without one.
const DefaultPool = "default"

// Topics of the pools' events.
const (
	TopicBudgetSet      = "pool.budget.set"
	TopicBreakerTripped = "pool.breaker.tripped"
	TopicBreakerReset   = "pool.breaker.reset"
	TopicNodePoolSet    = "node.pool.set"
)

// Budget is a pool's disruption budget and breaker.
type Budget struct {
	TenantID, Pool string
	// MaxConcurrent is how many of its nodes may be in disruptive
	// maintenance at once (0 stops all).
	MaxConcurrent int
	// MaxPerWindow is how many may start it within Window (0: no limit).
	MaxPerWindow int
	Window       time.Duration
	// BreakerFailures failed or unverified remediations within
	// BreakerWindow trip the breaker (0: never).
	BreakerFailures int
	BreakerWindow   time.Duration
	// BreakerTrippedAt is set while the breaker is open; BreakerReason says
	// why.
	BreakerTrippedAt *time.Time
	BreakerReason    string
	// Configured is false for a pool that has no row: the defaults.
	Configured bool
	UpdatedAt  time.Time
}

// Defaults is the budget of a pool nobody configured: one node at a time,
// no window limit, a breaker at 3 failures an hour.
func Defaults(tenantID, pool string) Budget {
	return Budget{TenantID: tenantID, Pool: pool, MaxConcurrent: 1, Window: DefaultWindow, BreakerFailures: 3, BreakerWindow: DefaultWindow}
}

func invalid(field, format string, args ...any) error {
	return &errcode.Error{Code: errcode.InvalidInput, Reason: "invalid-" + field, Message: fmt.Sprintf(format, args...), Details: map[string]string{"field": field}}
}

// CheckName checks a pool name: the id grammar.
func CheckName(pool string) error {
	if err := names.ID("pool", pool); err != nil {
		return invalid("pool", "%v", err)
	}
	return nil
}

// Validate checks a budget's numbers, naming the field that is wrong.
func (b Budget) Validate() error {
	if err := names.ID("pool", b.Pool); err != nil {
		return invalid("pool", "%v", err)
	}
	switch {
	case b.MaxConcurrent < 0 || b.MaxConcurrent > 100000:
		return invalid("maxConcurrent", "maxConcurrent %d must be 0 to 100000 (0 stops all disruptive maintenance in the pool)", b.MaxConcurrent)
	case b.MaxPerWindow < 0:
		return invalid("maxPerWindow", "maxPerWindow %d must be 0 (no limit) or more", b.MaxPerWindow)
	case b.Window < time.Minute || b.Window > 30*24*time.Hour:
		return invalid("windowSeconds", "window %s must be 1 minute to 30 days", b.Window)
	case b.BreakerFailures < 0:
		return invalid("breakerFailures", "breakerFailures %d must be 0 (never trips) or more", b.BreakerFailures)
	case b.BreakerWindow < time.Minute || b.BreakerWindow > 30*24*time.Hour:
		return invalid("breakerWindowSeconds", "breaker window %s must be 1 minute to 30 days", b.BreakerWindow)
	}
	return nil
}

const budgetColumns = `tenant_id, name, max_concurrent, max_per_window, window_seconds, breaker_failures, breaker_window_seconds,
  breaker_tripped_at, breaker_reason, updated_at`

func scanBudget(row pgx.Row) (Budget, error) {
	var (
		b           Budget
		win, brkWin int
	)
	if err := row.Scan(&b.TenantID, &b.Pool, &b.MaxConcurrent, &b.MaxPerWindow, &win, &b.BreakerFailures, &brkWin,
		&b.BreakerTrippedAt, &b.BreakerReason, &b.UpdatedAt); err != nil {
		return Budget{}, err
	}
	b.Window, b.BreakerWindow, b.Configured = time.Duration(win)*time.Second, time.Duration(brkWin)*time.Second, true
	return b, nil
}

// Get returns a pool's budget, the defaults for one without a row.
func Get(ctx context.Context, db store.DBTX, tenantID, pool string) (Budget, error) {
	b, err := scanBudget(db.QueryRow(ctx, `SELECT `+budgetColumns+` FROM pools WHERE tenant_id = $1 AND name = $2`, tenantID, pool))
	if errors.Is(err, pgx.ErrNoRows) {
		return Defaults(tenantID, pool), nil
	}
	if err != nil {
		return Budget{}, fmt.Errorf("reading pool %s: %w", pool, err)
	}
	return b, nil
}

// lockPool locks the pool's row in tx, creating it with the defaults, and
// returns the budget: the acquisitions of one pool take turns behind it.
func lockPool(ctx context.Context, tx pgx.Tx, tenantID, pool string) (Budget, error) {
	d := Defaults(tenantID, pool)
	if _, err := tx.Exec(ctx, `INSERT INTO pools (tenant_id, name, max_concurrent, max_per_window, window_seconds, breaker_failures, breaker_window_seconds)
		VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT DO NOTHING`, tenantID, pool, d.MaxConcurrent, d.MaxPerWindow,
		int(d.Window/time.Second), d.BreakerFailures, int(d.BreakerWindow/time.Second)); err != nil {
		return Budget{}, fmt.Errorf("creating pool %s: %w", pool, err)
	}
	b, err := scanBudget(tx.QueryRow(ctx, `SELECT `+budgetColumns+` FROM pools WHERE tenant_id = $1 AND name = $2 FOR UPDATE`, tenantID, pool))
	if err != nil {
		return Budget{}, fmt.Errorf("locking pool %s: %w", pool, err)
	}
	return b, nil
}

// Set stores a pool's budget in tx (the breaker's state is kept) and
// publishes pool.budget.set with who set it.
func Set(ctx context.Context, tx pgx.Tx, b Budget, by string) (Budget, error) {
	if err := b.Validate(); err != nil {
		return Budget{}, err
	}
	out, err := scanBudget(tx.QueryRow(ctx, `
		INSERT INTO pools (tenant_id, name, max_concurrent, max_per_window, window_seconds, breaker_failures, breaker_window_seconds)
		VALUES ($1, $2, $3, $4, $5, $6, $7)
		ON CONFLICT (tenant_id, name) DO UPDATE SET max_concurrent = $3, max_per_window = $4, window_seconds = $5,
		  breaker_failures = $6, breaker_window_seconds = $7, updated_at = now()
		RETURNING `+budgetColumns, b.TenantID, b.Pool, b.MaxConcurrent, b.MaxPerWindow, int(b.Window/time.Second),
		b.BreakerFailures, int(b.BreakerWindow/time.Second)))
	if err != nil {
		return Budget{}, fmt.Errorf("storing the budget of pool %s: %w", b.Pool, err)
	}
	return out, writeBudgetEvent(ctx, tx, out, by, "")
}

// writeBudgetEvent publishes pool.budget.set with the budget as stored;
// changed, when not empty, names the fields the caller set.
func writeBudgetEvent(ctx context.Context, tx pgx.Tx, out Budget, by, changed string) error {
	payload := map[string]any{"pool": out.Pool, "by": by,
		"maxConcurrent": out.MaxConcurrent, "maxPerWindow": out.MaxPerWindow, "windowSeconds": int(out.Window / time.Second),
		"breakerFailures": out.BreakerFailures, "breakerWindowSeconds": int(out.BreakerWindow / time.Second)}
	if changed != "" {
		payload["changed"] = changed
	}
	return events.Write(ctx, tx, out.TenantID, TopicBudgetSet, payload)
}

// SetNodePool moves a node into pool in tx and publishes node.pool.set. A
// node of another tenant, or none, is NOT_FOUND.
func SetNodePool(ctx context.Context, tx pgx.Tx, tenantID, nodeID, pool, by string) error {
	if err := names.ID("pool", pool); err != nil {
		return invalid("pool", "%v", err)
	}
	var prev string
	err := tx.QueryRow(ctx, `UPDATE nodes n SET pool = $3 FROM (SELECT id, pool FROM nodes WHERE id = $2 FOR UPDATE) o
		WHERE n.id = o.id AND n.tenant_id = $1 AND n.deleted_at IS NULL RETURNING o.pool`, tenantID, nodeID, pool).Scan(&prev)
	if errors.Is(err, pgx.ErrNoRows) {
		return &errcode.Error{Code: errcode.NotFound, Reason: "node-not-found", Message: "node " + nodeID + " not found", Details: map[string]string{"nodeId": nodeID}}
	}
	if err != nil {
		return fmt.Errorf("setting the pool of %s: %w", nodeID, err)
	}
	return events.Write(ctx, tx, tenantID, TopicNodePoolSet, map[string]any{"nodeId": nodeID, "pool": pool, "previous": prev, "by": by})
}

// SetJoinedNodePool moves a node into the pool its join token names, in
// the join's transaction. Unlike SetNodePool it publishes no event and
// checks neither tenant nor deletion: the token was made for this node, and
// the join's own checks (the node's allowed kinds) refuse a deleted one in
// the same transaction.
func SetJoinedNodePool(ctx context.Context, tx pgx.Tx, nodeID, pool string) error {
	if _, err := tx.Exec(ctx, `UPDATE nodes SET pool = $2 WHERE id = $1`, nodeID, pool); err != nil {
		return fmt.Errorf("setting the pool of %s: %w", nodeID, err)
	}
	return nil
}

// Status is a pool as operators see it: its budget and what uses it now.
type Status struct {
	Budget
	// Nodes counts the pool's nodes.
	Nodes int
	// InMaintenance counts its nodes under a maintenance lock now.
	InMaintenance int
	// StartedInWindow counts the remediations started within the window.
	StartedInWindow int
	// FailuresInWindow counts failed or unverified remediations within
	// the breaker's window.
	FailuresInWindow int
}

// List returns the tenant's pools (those with nodes or a budget), by name.
func List(ctx context.Context, db store.DBTX, tenantID string) ([]Status, error) {
	rows, err := db.Query(ctx, `
		WITH names AS (
		  SELECT DISTINCT pool AS name FROM nodes WHERE tenant_id = $1 AND deleted_at IS NULL
		  UNION SELECT name FROM pools WHERE tenant_id = $1)
		SELECT n.name FROM names n ORDER BY n.name`, tenantID)
	if err != nil {
		return nil, fmt.Errorf("listing pools: %w", err)
	}
	list, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("listing pools: %w", err)
	}
	out := make([]Status, 0, len(list))
	for _, name := range list {
		st, err := GetStatus(ctx, db, tenantID, name)
		if err != nil {
			return nil, err
		}
		out = append(out, st)
	}
	return out, nil
}

// GetStatus returns one pool's budget and use.
func GetStatus(ctx context.Context, db store.DBTX, tenantID, pool string) (Status, error) {
	b, err := Get(ctx, db, tenantID, pool)
	if err != nil {
		return Status{}, err
	}
	st := Status{Budget: b}
	err = db.QueryRow(ctx, `SELECT
		(SELECT count(*) FROM nodes WHERE tenant_id = $1 AND pool = $2 AND deleted_at IS NULL),
		(SELECT count(*) FROM maintenance_locks WHERE tenant_id = $1 AND pool = $2),
		(SELECT count(*) FROM remediations WHERE tenant_id = $1 AND pool = $2 AND started_at > now() - $3 * interval '1 second'),
		`+FailuresSQL("$4")+``,
		tenantID, pool, int(b.Window/time.Second), int(b.BreakerWindow/time.Second)).
		Scan(&st.Nodes, &st.InMaintenance, &st.StartedInWindow, &st.FailuresInWindow)
	if err != nil {
		return Status{}, fmt.Errorf("reading the use of pool %s: %w", pool, err)
	}
	return st, nil
}

// FailuresSQL counts the pool's failed or unverified remediations ($1
// tenant, $2 pool) within the breaker's window (seconds in the parameter
// window names, "$3") and since the breaker was last reset: what trips it.
func FailuresSQL(window string) string {
	return `(SELECT count(*) FROM remediations r WHERE r.tenant_id = $1 AND r.pool = $2 AND r.outcome IN ('failed', 'unverified')
		   AND r.finished_at > greatest(now() - ` + window + ` * interval '1 second',
		     coalesce((SELECT breaker_reset_at FROM pools WHERE tenant_id = $1 AND name = $2), '-infinity')))`
}

// Exists reports whether the tenant has pool (nodes in it or a budget).
func Exists(ctx context.Context, db store.DBTX, tenantID, pool string) (bool, error) {
	var ok bool
	err := db.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM nodes WHERE tenant_id = $1 AND pool = $2 AND deleted_at IS NULL)
		OR EXISTS (SELECT 1 FROM pools WHERE tenant_id = $1 AND name = $2)`, tenantID, pool).Scan(&ok)
	if err != nil {
		return false, fmt.Errorf("reading pool %s: %w", pool, err)
	}
	return ok, nil
}
