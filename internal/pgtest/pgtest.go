// Package pgtest gives each test its own fresh, empty PostgreSQL database
// (Create, Config) and a proxy that can cut its connections (Proxy). It reads
// the server from the PG* variables that scripts/with-postgres sets, and fails
// (never skips) when they are missing: CI always has them. It knows nothing of
// the control plane's schema: controlplane/internal/storetest migrates a
// database for the control plane's tests.
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Create makes an empty database (no migrations) for t and returns its name;
// it is dropped when the test ends. Tests of the migrations use it directly.
func Create(t testing.TB) string {
	t.Helper()
	if os.Getenv("PGHOST") == "" && os.Getenv("PGDATABASE") == "" {
		t.Fatalf("pgtest: no PostgreSQL: PGHOST and PGDATABASE are unset; run the tests under scripts/with-postgres (make test does)")
	}
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatalf("pgtest: random name: %v", err)
	}
	name := "bc_test_" + hex.EncodeToString(b[:])
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	admin, err := pgx.Connect(ctx, "")
	if err != nil {
		t.Fatalf("pgtest: connecting with the PG* environment: %v", err)
	}
	defer admin.Close(context.Background())
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatalf("pgtest: creating database %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		conn, err := pgx.Connect(ctx, "")
		if err != nil {
			t.Errorf("pgtest: connecting to drop %s: %v", name, err)
			return
		}
		defer conn.Close(context.Background())
		if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
			t.Errorf("pgtest: dropping %s: %v", name, err)
		}
	})
	return name
}

// Config returns a pool configuration for database name on the PG* server.
func Config(t testing.TB, name string) *pgxpool.Config {
	t.Helper()
	cfg, err := pgxpool.ParseConfig("")
	if err != nil {
		t.Fatalf("pgtest: parsing PG* environment: %v", err)
	}
	cfg.ConnConfig.Database = name
	return cfg
}
