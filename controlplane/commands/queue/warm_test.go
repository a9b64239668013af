package queue_test

import (
	"context"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/controlplane/commands/queue"
	"github.com/better-compute/commands/controlplane/internal/store"
	"github.com/better-compute/commands/controlplane/internal/storetest"
	"github.com/better-compute/commands/internal/pgtest"
)

// A pool opened with WarmConn as its AfterConnect (bc-server's) hands out
// connections that already prepared the statements a dispatch waits on,
// outside any transaction, and none of their rows changed; the
// connection that ran the migrations, on which they could not be prepared,
// is not among them.
func TestWarmedConnectionsHoldTheDispatchStatements(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// A database of its own, migrated by store.OpenConfig below.
	name := pgtest.Create(t)
	cfg, err := pgxpool.ParseConfig("")
	require.NoError(t, err)
	cfg.ConnConfig.Database = name
	cfg.MaxConns = 2
	cfg.AfterConnect = queue.WarmConn
	pool, err := store.OpenConfig(ctx, cfg, hclog.NewNullLogger())
	require.NoError(t, err)
	t.Cleanup(pool.Close)

	var held []*pgxpool.Conn
	for range 2 { // both of the pool's connections
		conn, err := pool.Acquire(ctx)
		require.NoError(t, err)
		held = append(held, conn)
		// ListOpenMany, NodesWithOpen and TransitionSet's statement.
		require.GreaterOrEqual(t, preparedOverCommands(t, conn), 3, "the connection came warmed")
		require.Equal(t, byte('I'), conn.Conn().PgConn().TxStatus(), "warming left no transaction open")
	}
	for _, c := range held {
		c.Release()
	}
	var n int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM commands`).Scan(&n))
	require.Zero(t, n)
}

// Without WarmConn a new connection has prepared nothing: the check above
// could fail.
func TestUnwarmedConnectionsHoldNoStatements(t *testing.T) {
	t.Parallel()
	pool := storetest.DBConfig(t, func(c *pgxpool.Config) { c.MaxConns = 1 })
	conn, err := pool.Acquire(context.Background())
	require.NoError(t, err)
	defer conn.Release()
	require.Zero(t, preparedOverCommands(t, conn))
}

// preparedOverCommands counts the statements over the commands table that
// conn's session has prepared.
func preparedOverCommands(t *testing.T, conn *pgxpool.Conn) int {
	t.Helper()
	var n int
	require.NoError(t, conn.QueryRow(context.Background(),
		`SELECT count(*) FROM pg_prepared_statements WHERE statement ILIKE '%commands%' AND statement NOT ILIKE '%pg_prepared_statements%'`).Scan(&n))
	return n
}
