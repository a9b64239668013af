package pgtest_test

import (
	"context"
	"testing"

	"github.com/better-compute/commands/internal/pgtest"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
)

// Each call gets its own migrated database: a row written in one is absent
// from the other.
func TestDBIsolated(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a, b := pgtest.DB(t), pgtest.DB(t)
	var nameA, nameB string
	require.NoError(t, a.QueryRow(ctx, `SELECT current_database()`).Scan(&nameA))
	require.NoError(t, b.QueryRow(ctx, `SELECT current_database()`).Scan(&nameB))
	require.NotEqual(t, nameA, nameB)
	_, err := a.Exec(ctx, `INSERT INTO tenants (id) VALUES ('tenant_x')`)
	require.NoError(t, err)
	var n int
	require.NoError(t, b.QueryRow(ctx, `SELECT count(*) FROM tenants`).Scan(&n))
	require.Zero(t, n)
}

// A cut proxy is an outage: a query through it fails, and once restored the
// pool reconnects and the same query works.
func TestProxyCutAndRestore(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	direct := pgtest.DB(t)
	p := pgtest.NewProxy(t)
	pool, err := pgxpool.NewWithConfig(ctx, p.Config(t, direct.Config().ConnConfig.Database))
	require.NoError(t, err)
	defer pool.Close()
	var one int
	require.NoError(t, pool.QueryRow(ctx, `SELECT 1`).Scan(&one))

	p.Cut()
	require.Error(t, pool.QueryRow(ctx, `SELECT 1`).Scan(&one), "a held connection is dropped")
	require.Error(t, pool.QueryRow(ctx, `SELECT 1`).Scan(&one), "a new connection is refused")
	require.NoError(t, direct.QueryRow(ctx, `SELECT 1`).Scan(&one), "the server itself keeps running")

	p.Restore()
	require.NoError(t, pool.QueryRow(ctx, `SELECT 1`).Scan(&one))
}
