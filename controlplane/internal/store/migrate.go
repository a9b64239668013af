package store

import (
	"context"
	"embed"
	"fmt"
	"io/fs"
	"sort"
	"strings"

	"github.com/hashicorp/go-hclog"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

//go:embed migrations/*.sql
var migrationFS embed.FS

// migrationLockKey is the pg_advisory_xact_lock key that serialises
// migrations. Advisory locks are per database, so it only orders replicas of
// one control plane.
const migrationLockKey int64 = 0x62635f6d6967 // "bc_mig"

// Migration is one embedded schema change.
type Migration struct {
	// Version is the file name without ".sql", such as "0001_init".
	Version string
	// SQL is the file's content.
	SQL string
}

// Migrations returns the embedded migrations in the order they apply.
func Migrations() ([]Migration, error) {
	entries, err := fs.ReadDir(migrationFS, "migrations")
	if err != nil {
		return nil, fmt.Errorf("reading embedded migrations: %w", err)
	}
	var out []Migration
	for _, e := range entries {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".sql") {
			continue
		}
		b, err := migrationFS.ReadFile("migrations/" + e.Name())
		if err != nil {
			return nil, fmt.Errorf("reading migration %s: %w", e.Name(), err)
		}
		out = append(out, Migration{Version: strings.TrimSuffix(e.Name(), ".sql"), SQL: string(b)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	return out, nil
}

// Migrate applies every embedded migration that the database has not
// recorded in schema_migrations, then River's own migrations (rivermigrate:
// the job tables behind the modules' durable wakes and jobs). Each runs in its own transaction that first
// takes a transaction-scoped advisory lock, so a second replica waits and then
// finds the version recorded; a failed migration rolls back whole.
func Migrate(ctx context.Context, pool *pgxpool.Pool, logger hclog.Logger) error {
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	logger = logger.Named("migrate")
	ms, err := Migrations()
	if err != nil {
		return err
	}
	for _, m := range ms {
		applied, err := applyOne(ctx, pool, m)
		if err != nil {
			return fmt.Errorf("migration %s: %w", m.Version, err)
		}
		if applied {
			logger.Info("applied migration", "version", m.Version)
		}
	}
	return migrateRiver(ctx, pool, logger)
}

func applyOne(ctx context.Context, pool *pgxpool.Pool, m Migration) (applied bool, err error) {
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, migrationLockKey); err != nil {
			return fmt.Errorf("taking the migration lock: %w", err)
		}
		// Created under the lock: two replicas racing on CREATE TABLE IF NOT
		// EXISTS can otherwise both try to create it.
		if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
			version text PRIMARY KEY,
			applied_at timestamptz NOT NULL DEFAULT now())`); err != nil {
			return fmt.Errorf("creating schema_migrations: %w", err)
		}
		var done bool
		if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM schema_migrations WHERE version = $1)`, m.Version).Scan(&done); err != nil {
			return fmt.Errorf("reading schema_migrations: %w", err)
		}
		if done {
			return nil
		}
		if _, err := tx.Exec(ctx, m.SQL); err != nil {
			return fmt.Errorf("applying: %w", err)
		}
		if _, err := tx.Exec(ctx, `INSERT INTO schema_migrations (version) VALUES ($1)`, m.Version); err != nil {
			return fmt.Errorf("recording: %w", err)
		}
		applied = true
		return nil
	})
	return applied, err
}
