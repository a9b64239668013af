package store_test

import (
	"context"
	"sync"
	"testing"

	"github.com/better-compute/commands/controlplane/internal/store"
	"github.com/better-compute/commands/controlplane/internal/storetest"
	"github.com/better-compute/commands/internal/pgtest"
	"github.com/hashicorp/go-hclog"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
)

func migrated(t *testing.T, pool *pgxpool.Pool) []string {
	t.Helper()
	rows, err := pool.Query(context.Background(), `SELECT version FROM schema_migrations ORDER BY version`)
	require.NoError(t, err)
	defer rows.Close()
	var out []string
	for rows.Next() {
		var v string
		require.NoError(t, rows.Scan(&v))
		out = append(out, v)
	}
	require.NoError(t, rows.Err())
	return out
}

func versions(t *testing.T) []string {
	t.Helper()
	ms, err := store.Migrations()
	require.NoError(t, err)
	require.NotEmpty(t, ms)
	var out []string
	for _, m := range ms {
		out = append(out, m.Version)
	}
	return out
}

// Migrations apply each once and in order; applying again changes nothing.
func TestMigrateIdempotent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := storetest.DB(t) // migrated once already
	require.Equal(t, versions(t), migrated(t, pool))
	require.NoError(t, store.Migrate(ctx, pool, hclog.NewNullLogger()))
	require.NoError(t, store.Migrate(ctx, pool, nil))
	require.Equal(t, versions(t), migrated(t, pool))
	// River's own tables come with the store's migrations (rivermigrate).
	for _, table := range []string{"tenants", "nodes", "commands", "outbox", "node_specs", "pools", "maintenance_locks", "remediations", "river_job", "river_migration", "river_leader"} {
		var ok bool
		require.NoError(t, pool.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, table).Scan(&ok))
		require.True(t, ok, table)
	}
}

// Two replicas starting together: the advisory lock makes them take turns,
// both succeed, and every migration is applied once.
func TestMigrateConcurrentReplicas(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	name := pgtest.Create(t)
	const replicas = 4
	pools := make([]*pgxpool.Pool, replicas)
	for i := range pools {
		p, err := pgxpool.NewWithConfig(ctx, pgtest.Config(t, name))
		require.NoError(t, err)
		t.Cleanup(p.Close)
		pools[i] = p
	}
	start := make(chan struct{})
	errs := make(chan error, replicas)
	var wg sync.WaitGroup
	for _, p := range pools {
		wg.Go(func() {
			<-start
			errs <- store.Migrate(ctx, p, hclog.NewNullLogger())
		})
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.Equal(t, versions(t), migrated(t, pools[0]))
}

// Open reads the PG* environment, migrates and returns a working pool.
func TestOpen(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	name := pgtest.Create(t)
	cfg := pgtest.Config(t, name)
	pool, err := store.OpenConfig(ctx, cfg, hclog.NewNullLogger())
	require.NoError(t, err)
	defer pool.Close()
	require.Equal(t, versions(t), migrated(t, pool))

	_, err = store.Open(ctx, "postgres://%zz", nil)
	require.Error(t, err)
}
