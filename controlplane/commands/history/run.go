package history

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/better-compute/commands/controlplane/commands/history/archive"
	"github.com/better-compute/commands/controlplane/commands/sweeper"
	"github.com/better-compute/commands/controlplane/internal/store"
)

// LeaseName names the archiver's row in leader_leases: one replica of the
// fleet archives at a time, as one sweeps.
const LeaseName = "history-archiver"

// DefaultInterval is how often the leader looks for expired hours.
const DefaultInterval = 10 * time.Minute

// Runner runs an Archiver on the replica that holds its lease.
type Runner struct {
	arch     *Archiver
	lease    *sweeper.Lease
	interval time.Duration
	logger   hclog.Logger
	// OnPass, when set, is told of each pass (the server's metrics).
	OnPass func(Stats, time.Duration)
}

// NewRunner builds a runner for the archiver that pool, sink, policy and
// opts make; opts.Renew is set to the lease's renewal.
func NewRunner(pool *pgxpool.Pool, sink archive.Sink, policy Policy, opts Options, interval time.Duration, holder string) *Runner {
	if interval <= 0 {
		interval = DefaultInterval
	}
	if holder == "" {
		host, _ := os.Hostname()
		holder = fmt.Sprintf("%s/%d", host, os.Getpid())
	}
	if opts.Logger == nil {
		opts.Logger = hclog.NewNullLogger()
	}
	// The lease outlives a pass's slowest step (one hour's object upload)
	// and is renewed before every delete batch.
	lease := sweeper.NewLease(pool, LeaseName, holder, 2*time.Minute)
	opts.Renew = func(ctx context.Context, tx store.DBTX) (bool, error) { return lease.Renew(ctx, tx) }
	return &Runner{arch: NewArchiver(pool, sink, policy, opts), lease: lease, interval: interval,
		logger: opts.Logger.Named("history").With("holder", holder)}
}

// Run elects and archives every interval until ctx ends, then resigns.
func (r *Runner) Run(ctx context.Context) {
	t := time.NewTicker(r.interval)
	defer t.Stop()
	for {
		r.tick(ctx)
		select {
		case <-ctx.Done():
			// Resign after ctx ended: its values, a deadline of its own.
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			if err := r.lease.Resign(rctx); err != nil {
				r.logger.Warn("resigning", "error", err)
			}
			cancel()
			return
		case <-t.C:
		}
	}
}

func (r *Runner) tick(ctx context.Context) {
	if r.lease.Term() != "" && !r.lease.Held(time.Now()) {
		r.lease.StepDown()
	}
	if r.lease.Term() == "" {
		won, err := r.lease.Elect(ctx)
		if err != nil || !won {
			if err != nil && ctx.Err() == nil {
				r.logger.Warn("election failed", "error", err)
			}
			return
		}
		r.logger.Info("elected", "term", r.lease.Term())
	}
	start := time.Now()
	st, err := r.arch.Pass(ctx)
	if r.OnPass != nil {
		r.OnPass(st, time.Since(start))
	}
	if err != nil && ctx.Err() == nil {
		r.logger.Warn("archive pass failed", "error", err, "rows", st.Rows())
		return
	}
	if st.Rows() > 0 {
		r.logger.Info("archived", "hours", st.Hours, "commands", st.Commands, "events", st.Events, "jobs", st.Jobs,
			"held", st.Held, "took", time.Since(start).Round(time.Millisecond))
	}
}
