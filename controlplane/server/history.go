package server

import (
	"context"
	"errors"
	"time"

	"github.com/better-compute/commands/controlplane/commands/bundles"
	"github.com/better-compute/commands/controlplane/commands/history"
	"github.com/better-compute/commands/controlplane/commands/history/archive"
)

// largeHistoryRows is the commands table's size above which bc-server,
// with retention off, says at start that history grows without bound.
const largeHistoryRows = 5_000_000

// newHistory builds the history archiver where retention is on and this
// process runs the sweeper component. Retention needs a blob store that the
// control plane can write (supportBundles). With retention off it warns
// once when the commands table is already large.
func (s *Server) newHistory(ctx context.Context, cfg Config, blob bundles.BlobStore) error {
	days, tenants, err := cfg.History.Policy()
	if err != nil {
		return err
	}
	policy := history.Policy{Days: days, Tenants: tenants}
	for id := range tenants {
		if err := archive.CheckTenant(id); err != nil {
			return err
		}
	}
	if !policy.Enabled() {
		var est float64
		if err := s.pool.QueryRow(ctx, `SELECT reltuples FROM pg_class WHERE oid = 'commands'::regclass`).Scan(&est); err == nil && est > largeHistoryRows {
			s.logger.Warn("history retention is off and the commands table is large: history grows without bound; set history.retentionDays (docs/operator-guide.md, \"History retention\")",
				"commands_estimate", int64(est))
		}
		return nil
	}
	sink, ok := blob.(archive.Sink)
	if !ok {
		return errors.New("history.retentionDays needs supportBundles: the archive is written to its blob store")
	}
	if cfg.Sweeper.Disabled || !cfg.Runs(ComponentSweeper) {
		return nil
	}
	s.history = history.NewRunner(s.pool, sink, policy, history.Options{Batch: cfg.History.Batch, Logger: s.logger},
		time.Duration(cfg.History.Interval), "")
	s.logger.Info("history retention on", "retention_days", days, "tenant_overrides", len(tenants))
	return nil
}
