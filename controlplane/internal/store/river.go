package store

import (
	"context"
	"fmt"

	"github.com/hashicorp/go-hclog"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/better-compute/commands/internal/hclogslog"
)

// migrateRiver brings River's own tables (river_job, river_leader,
// river_queue, river_migration, ...) up to the version the linked River
// needs. The module API's durable owner wakes and the modules' jobs live
// there (controlplane/commands/wakes). Each River version is applied in its own
// transaction (one adds an enum value that a later one uses, which
// PostgreSQL refuses within one transaction) under the transaction-scoped
// advisory lock of the embedded migrations, so replicas take turns, and a
// pool of one connection is enough.
func migrateRiver(ctx context.Context, pool *pgxpool.Pool, logger hclog.Logger) error {
	migrator, err := rivermigrate.New(riverpgxv5.New(pool), &rivermigrate.Config{Logger: hclogslog.New(logger.Named("river"))})
	if err != nil {
		return fmt.Errorf("river migrations: %w", err)
	}
	for {
		var applied []rivermigrate.MigrateVersion
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, migrationLockKey); err != nil {
				return fmt.Errorf("taking the migration lock for river: %w", err)
			}
			// MigrateTx is deprecated because some river migrations cannot
			// share a transaction; MaxSteps: 1 runs one per transaction,
			// under the advisory lock that serialises bc-server replicas.
			//lint:ignore SA1019 one migration a transaction, under our lock (see above)
			res, err := migrator.MigrateTx(ctx, tx, rivermigrate.DirectionUp, &rivermigrate.MigrateOpts{MaxSteps: 1})
			if err != nil {
				return err
			}
			applied = res.Versions
			return nil
		})
		if err != nil {
			return fmt.Errorf("river migrations: %w", err)
		}
		if len(applied) == 0 {
			return nil
		}
		for _, v := range applied {
			logger.Info("applied river migration", "version", v.Version)
		}
	}
}
