// Package store opens the control plane's PostgreSQL pool and brings its
// schema up to date. Migrations are embedded SQL files applied at start-up in
// name order, each once, each in its own transaction, under an advisory lock so
// that replicas starting together take turns instead of racing.
package store

import (
	"context"
	"fmt"

	"github.com/hashicorp/go-hclog"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// DBTX is what queries run on: a *pgxpool.Pool, a *pgx.Conn or a pgx.Tx.
// Functions that must be atomic with the caller's work take a pgx.Tx instead.
type DBTX interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Open connects to the database named by dsn ("" reads the PG* environment
// variables), applies pending migrations and returns the pool.
func Open(ctx context.Context, dsn string, logger hclog.Logger) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("parsing database url: %w", err)
	}
	return OpenConfig(ctx, cfg, logger)
}

// OpenConfig is Open with a parsed pool configuration.
func OpenConfig(ctx context.Context, cfg *pgxpool.Config, logger hclog.Logger) (*pgxpool.Pool, error) {
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("connecting to postgres: %w", err)
	}
	if err := Migrate(ctx, pool, logger); err != nil {
		pool.Close()
		return nil, err
	}
	return pool, nil
}
