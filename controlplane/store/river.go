package store

import (
	"context"
	"fmt"

	"github.com/hashicorp/go-hclog"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/better-compute/commands/internal/hclogslog"
)

// migrateRiver brings River's own tables (river_job, river_leader,
// river_queue, river_migration, ...) up to the version the linked River
// needs. The module API's durable owner wakes and the modules' jobs live
// there (controlplane/wakes). River applies each of its versions in its own
// transaction (one of them adds an enum value that a later statement uses,
// which PostgreSQL refuses inside one transaction), so replicas take turns
// under a session-level advisory lock, the key of the embedded migrations,
// held on a connection of its own.
func migrateRiver(ctx context.Context, pool *pgxpool.Pool, logger hclog.Logger) error {
	migrator, err := rivermigrate.New(riverpgxv5.New(pool), &rivermigrate.Config{Logger: hclogslog.New(logger.Named("river"))})
	if err != nil {
		return fmt.Errorf("river migrations: %w", err)
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("river migrations: %w", err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock($1)`, migrationLockKey); err != nil {
		return fmt.Errorf("taking the migration lock for river: %w", err)
	}
	defer func() {
		if _, err := conn.Exec(context.WithoutCancel(ctx), `SELECT pg_advisory_unlock($1)`, migrationLockKey); err != nil {
			// A lock we cannot release dies with the connection.
			conn.Conn().Close(context.WithoutCancel(ctx))
		}
	}()
	res, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil)
	if err != nil {
		return fmt.Errorf("river migrations: %w", err)
	}
	for _, v := range res.Versions {
		logger.Info("applied river migration", "version", v.Version)
	}
	return nil
}
