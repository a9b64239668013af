package pgtest_test

import (
	"context"
	"testing"

	"github.com/better-compute/commands/internal/pgtest"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
)

// Each call gets its own empty database: a table made in one is absent
// from the other.
func TestCreateIsolated(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	open := func() *pgxpool.Pool {
		pool, err := pgxpool.NewWithConfig(ctx, pgtest.Config(t, pgtest.Create(t)))
		require.NoError(t, err)
		t.Cleanup(pool.Close)
		return pool
	}
	a, b := open(), open()
	_, err := a.Exec(ctx, `CREATE TABLE only_in_a (id int)`)
	require.NoError(t, err)
	var n int
	require.NoError(t, b.QueryRow(ctx, `SELECT count(*) FROM pg_tables WHERE tablename = 'only_in_a'`).Scan(&n))
	require.Zero(t, n)
	require.NoError(t, a.QueryRow(ctx, `SELECT count(*) FROM pg_tables WHERE tablename = 'only_in_a'`).Scan(&n))
	require.Equal(t, 1, n)
}

// A cut proxy is an outage: a query through it fails, and once restored the
// pool reconnects and the same query works.
func TestProxyCutAndRestore(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	name := pgtest.Create(t)
	direct, err := pgxpool.NewWithConfig(ctx, pgtest.Config(t, name))
	require.NoError(t, err)
	defer direct.Close()
	p := pgtest.NewProxy(t)
	pool, err := pgxpool.NewWithConfig(ctx, p.Config(t, name))
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
