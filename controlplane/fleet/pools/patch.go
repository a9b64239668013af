package pools

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/better-compute/commands/controlplane/internal/errcode"
)

// DefaultWindow is the budget's and the breaker's window when none is set.
const DefaultWindow = time.Hour

// Patch is a change to a pool's budget: a nil field is left as it is, so a
// caller that names only maxPerWindow does not reset maxConcurrent to 0,
// which would stop all disruptive maintenance in the pool.
type Patch struct {
	MaxConcurrent   *int
	MaxPerWindow    *int
	Window          *time.Duration
	BreakerFailures *int
	BreakerWindow   *time.Duration
	// StopAll confirms a MaxConcurrent of 0: without it such a patch is
	// refused, saying what it would do.
	StopAll bool
}

// Empty reports whether p changes nothing.
func (p Patch) Empty() bool {
	return p.MaxConcurrent == nil && p.MaxPerWindow == nil && p.Window == nil && p.BreakerFailures == nil && p.BreakerWindow == nil
}

// fields names the fields p sets, in the API's words.
func (p Patch) fields() []string {
	var out []string
	for _, f := range []struct {
		name string
		set  bool
	}{{"maxConcurrent", p.MaxConcurrent != nil}, {"maxPerWindow", p.MaxPerWindow != nil}, {"windowSeconds", p.Window != nil},
		{"breakerFailures", p.BreakerFailures != nil}, {"breakerWindowSeconds", p.BreakerWindow != nil}} {
		if f.set {
			out = append(out, f.name)
		}
	}
	return out
}

// apply changes b by p; a window of 0 is the default hour.
func (p Patch) apply(b Budget) Budget {
	if p.MaxConcurrent != nil {
		b.MaxConcurrent = *p.MaxConcurrent
	}
	if p.MaxPerWindow != nil {
		b.MaxPerWindow = *p.MaxPerWindow
	}
	if p.Window != nil {
		b.Window = *p.Window
		if b.Window == 0 {
			b.Window = DefaultWindow
		}
	}
	if p.BreakerFailures != nil {
		b.BreakerFailures = *p.BreakerFailures
	}
	if p.BreakerWindow != nil {
		b.BreakerWindow = *p.BreakerWindow
		if b.BreakerWindow == 0 {
			b.BreakerWindow = DefaultWindow
		}
	}
	return b
}

// check refuses a patch that sets nothing, and a maxConcurrent of 0 that
// StopAll does not confirm.
func (p Patch) check(pool string) error {
	if p.Empty() {
		return &errcode.Error{Code: errcode.InvalidInput, Reason: "invalid-budget",
			Message: "set-budget of pool " + pool + " names no field to change: give maxConcurrent, maxPerWindow, windowSeconds, breakerFailures or breakerWindowSeconds (the others keep their values)",
			Details: map[string]string{"field": "maxConcurrent"}}
	}
	if p.MaxConcurrent != nil && *p.MaxConcurrent == 0 && !p.StopAll {
		return &errcode.Error{Code: errcode.InvalidInput, Reason: "invalid-maxConcurrent",
			Message: "maxConcurrent 0 stops all disruptive maintenance in pool " + pool +
				" (the platform's remediation and its rollouts wait until it is raised); to mean that, set stopAllMaintenance=true too",
			Details: map[string]string{"field": "maxConcurrent"}}
	}
	return nil
}

// Update changes pool's budget by p in tx: the pool's row is locked
// (created with the defaults when it has none), p's fields replace the
// stored ones and the others are kept, the result is validated and stored,
// and pool.budget.set names the fields that changed and who changed them.
func Update(ctx context.Context, tx pgx.Tx, tenantID, pool string, p Patch, by string) (Budget, error) {
	if err := CheckName(pool); err != nil {
		return Budget{}, err
	}
	if err := p.check(pool); err != nil {
		return Budget{}, err
	}
	cur, err := lockPool(ctx, tx, tenantID, pool)
	if err != nil {
		return Budget{}, err
	}
	next := p.apply(cur)
	if err := next.Validate(); err != nil {
		return Budget{}, err
	}
	out, err := scanBudget(tx.QueryRow(ctx, `UPDATE pools SET max_concurrent = $3, max_per_window = $4, window_seconds = $5,
		breaker_failures = $6, breaker_window_seconds = $7, updated_at = now()
		WHERE tenant_id = $1 AND name = $2 RETURNING `+budgetColumns, tenantID, pool, next.MaxConcurrent, next.MaxPerWindow,
		int(next.Window/time.Second), next.BreakerFailures, int(next.BreakerWindow/time.Second)))
	if err != nil {
		return Budget{}, fmt.Errorf("storing the budget of pool %s: %w", pool, err)
	}
	if err := writeBudgetEvent(ctx, tx, out, by, strings.Join(p.fields(), ",")); err != nil {
		return Budget{}, err
	}
	return out, nil
}
