// Package storetest gives each control-plane test its own fresh PostgreSQL
// database with the control plane's migrations applied (store.OpenConfig
// migrates on open), on the server scripts/with-postgres starts. The empty
// database and its name come from internal/pgtest, which stays neutral.
package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/better-compute/commands/controlplane/internal/store"
	"github.com/better-compute/commands/internal/pgtest"
)

// DB creates a database for t, migrates it, and returns a pool on it. The
// pool is closed and the database dropped when the test ends.
func DB(t testing.TB) *pgxpool.Pool {
	t.Helper()
	return DBConfig(t, nil)
}

// DBConfig is DB with a hook that may adjust the pool configuration (size,
// connection hooks) before it connects.
func DBConfig(t testing.TB, adjust func(*pgxpool.Config)) *pgxpool.Pool {
	t.Helper()
	name := pgtest.Create(t)
	cfg, err := pgxpool.ParseConfig("")
	if err != nil {
		t.Fatalf("storetest: parsing PG* environment: %v", err)
	}
	cfg.ConnConfig.Database = name
	if adjust != nil {
		adjust(cfg)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pool, err := store.OpenConfig(ctx, cfg, hclog.NewNullLogger())
	if err != nil {
		t.Fatalf("storetest: opening %s: %v", name, err)
	}
	t.Cleanup(pool.Close)
	return pool
}
