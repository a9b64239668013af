package pools_test

import (
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/controlplane/fleet/pools"
	"github.com/better-compute/commands/controlplane/internal/errcode"
)

func (b *bundle) update(t *testing.T, p pools.Patch) (pools.Budget, error) {
	t.Helper()
	var out pools.Budget
	err := pgx.BeginFunc(b.ctx, b.pool, func(tx pgx.Tx) error {
		var err error
		out, err = pools.Update(b.ctx, tx, b.tenant, "gpu-a", p, "ops")
		return err
	})
	return out, err
}

func ptr[T any](v T) *T { return &v }

// Issue 35: "set-budget without maxConcurrent sets it to 0, which silently
// stops all remediation in the pool, although the docs say it defaults to
// 1." Update changes only the fields given: a pool without a budget starts
// from the defaults, a later change keeps what an earlier one set, and
// pool.budget.set names the fields that changed.
func TestUpdateChangesOnlyTheFieldsGiven(t *testing.T) {
	b := setup(t, 0)
	got, err := b.update(t, pools.Patch{MaxPerWindow: ptr(10), Window: ptr(30 * time.Minute)})
	require.NoError(t, err)
	require.Equal(t, 1, got.MaxConcurrent, "maxConcurrent keeps its default of 1")
	require.Equal(t, 10, got.MaxPerWindow)
	require.Equal(t, 30*time.Minute, got.Window)
	require.Equal(t, 3, got.BreakerFailures)
	require.Equal(t, time.Hour, got.BreakerWindow)

	got, err = b.update(t, pools.Patch{MaxConcurrent: ptr(4)})
	require.NoError(t, err)
	require.Equal(t, 4, got.MaxConcurrent)
	require.Equal(t, 10, got.MaxPerWindow, "an earlier change is kept")
	require.Equal(t, 30*time.Minute, got.Window)

	got, err = b.update(t, pools.Patch{BreakerFailures: ptr(0), Window: ptr(time.Duration(0))})
	require.NoError(t, err)
	require.Equal(t, 0, got.BreakerFailures, "0 is a value when it is given: the breaker never trips")
	require.Equal(t, time.Hour, got.Window, "a window of 0 is the default hour")
	require.Equal(t, 4, got.MaxConcurrent)

	var changed []string
	rows, err := b.pool.Query(b.ctx, `SELECT payload->>'changed' FROM outbox WHERE topic = $1 ORDER BY id`, pools.TopicBudgetSet)
	require.NoError(t, err)
	changed, err = pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Equal(t, []string{"maxPerWindow,windowSeconds", "maxConcurrent", "windowSeconds,breakerFailures"}, changed)
}

// "a budget that would stop all remediation (maxConcurrent 0) needs an
// explicit flag and says so": without StopAll it is refused, naming the
// field and the confirmation, and nothing is stored; with it, it holds.
// A patch that names nothing and a bad value are refused, named.
func TestUpdateRefusesAStopWithoutTheFlag(t *testing.T) {
	b := setup(t, 0)
	_, err := b.update(t, pools.Patch{MaxConcurrent: ptr(0)})
	var ce *errcode.Error
	require.True(t, errors.As(err, &ce), "%v", err)
	require.Equal(t, errcode.InvalidInput, ce.Code)
	require.Equal(t, "maxConcurrent", ce.Details["field"])
	require.Contains(t, ce.Message, "stops all disruptive maintenance in pool gpu-a")
	require.Contains(t, ce.Message, "stopAllMaintenance=true")
	st, err := pools.Get(b.ctx, b.pool, b.tenant, "gpu-a")
	require.NoError(t, err)
	require.False(t, st.Configured, "a refused patch stores nothing")

	got, err := b.update(t, pools.Patch{MaxConcurrent: ptr(0), StopAll: true})
	require.NoError(t, err)
	require.Equal(t, 0, got.MaxConcurrent)

	_, err = b.update(t, pools.Patch{})
	require.True(t, errors.As(err, &ce), "%v", err)
	require.Contains(t, ce.Message, "names no field to change")

	_, err = b.update(t, pools.Patch{MaxPerWindow: ptr(-1)})
	require.True(t, errors.As(err, &ce), "%v", err)
	require.Equal(t, "maxPerWindow", ce.Details["field"])
}
