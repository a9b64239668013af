package fleetruns

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/better-compute/commands/controlplane/commands/events"
	"github.com/better-compute/commands/controlplane/commands/sweeper"
)

// LeaseName is the advancer's singleton lease in leader_leases.
const LeaseName = "fleet-run-advancer"

// Advancer defaults.
const (
	// DefaultInterval is how often the advancer passes without a wake-up,
	// and how often a follower tries to become the leader.
	DefaultInterval = time.Second
	// DefaultMinGap is the least time between two passes: the wake-ups of
	// a busy fleet (every settled command announces itself) coalesce into
	// one pass per gap.
	DefaultMinGap = 50 * time.Millisecond
)

// AdvancerOptions configure an Advancer.
type AdvancerOptions struct {
	Interval, MinGap, LeaseTTL time.Duration
	// Holder names this process in the lease (host/pid).
	Holder string
}

// Advancer is the leader-elected loop that advances the fleet's runs: one
// in the fleet at a time (a lease like the sweeper's, renewed in each
// pass's transaction, so a pass commits only while the term holds). It
// wakes on the outbox's NOTIFY (a settled command writes command.settled),
// on this process's own runs being created or controlled, and every
// Interval.
type Advancer struct {
	s       *Service
	opts    AdvancerOptions
	lease   *sweeper.Lease
	leading atomic.Bool
}

// NewAdvancer returns the advancer of s.
func NewAdvancer(s *Service, opts AdvancerOptions) *Advancer {
	if opts.Interval <= 0 {
		opts.Interval = DefaultInterval
	}
	if opts.MinGap <= 0 {
		opts.MinGap = DefaultMinGap
	}
	if opts.LeaseTTL <= 0 {
		opts.LeaseTTL = max(5*time.Second, 3*opts.Interval)
	}
	if opts.Holder == "" {
		host, _ := os.Hostname()
		opts.Holder = fmt.Sprintf("%s/%d", host, os.Getpid())
	}
	return &Advancer{s: s, opts: opts, lease: sweeper.NewLease(s.pool, LeaseName, opts.Holder, opts.LeaseTTL)}
}

// Leading reports whether this advancer held the lease at its last pass.
func (a *Advancer) Leading() bool { return a.leading.Load() }

// Run advances runs until ctx ends, then resigns the lease.
func (a *Advancer) Run(ctx context.Context) {
	logger := a.s.logger.Named("advancer").With("holder", a.opts.Holder)
	notified := events.Listen(ctx, a.s.pool, a.opts.Interval, logger)
	tick := time.NewTicker(a.opts.Interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			a.resign(logger)
			return
		case _, ok := <-notified:
			if !ok {
				a.resign(logger)
				return
			}
		case <-a.s.wake:
		case <-tick.C:
		}
		for {
			more, err := a.pass(ctx)
			if err != nil && ctx.Err() == nil {
				logger.Warn("fleet-run pass failed; the next wake-up retries it", "error", err)
			}
			if !more || ctx.Err() != nil {
				break
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(a.opts.MinGap):
		}
	}
}

func (a *Advancer) resign(logger interface{ Warn(string, ...any) }) {
	a.leading.Store(false)
	rctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := a.lease.Resign(rctx); err != nil {
		logger.Warn("resigning the fleet-run lease", "error", err)
	}
}

// pass advances every open run once, when this process leads; more says a
// run could start more at once.
func (a *Advancer) pass(ctx context.Context) (more bool, failed error) {
	if a.lease.Term() != "" && !a.lease.Held(time.Now()) {
		a.lease.StepDown()
	}
	if a.lease.Term() == "" {
		won, err := a.lease.Elect(ctx)
		if err != nil || !won {
			a.leading.Store(false)
			return false, err
		}
	}
	a.leading.Store(true)
	ids, err := a.s.openRunIDs(ctx)
	if err != nil {
		return false, err
	}
	for _, id := range ids {
		var res passResult
		err := pgx.BeginFunc(ctx, a.s.pool, func(tx pgx.Tx) error {
			ok, err := a.lease.Renew(ctx, tx)
			if err != nil {
				return err
			}
			if !ok {
				return errLostLease
			}
			res, err = a.s.advance(ctx, tx, id)
			return err
		})
		if errors.Is(err, errLostLease) {
			a.leading.Store(false)
			return false, nil
		}
		if err != nil {
			// One run's failure does not hold the others: it is logged
			// and tried again at the next pass.
			if ctx.Err() != nil {
				return false, ctx.Err()
			}
			failed = errors.Join(failed, fmt.Errorf("advancing run %s: %w", id, err))
			continue
		}
		more = more || res.more
	}
	return more, failed
}

var errLostLease = fmt.Errorf("the fleet-run lease was lost")

// AdvanceOnce runs one pass over every open run in this process, without
// the lease: for tests and tools that drive runs step by step.
func (s *Service) AdvanceOnce(ctx context.Context) error {
	ids, err := s.openRunIDs(ctx)
	if err != nil {
		return err
	}
	for _, id := range ids {
		if err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
			_, err := s.advance(ctx, tx, id)
			return err
		}); err != nil {
			return fmt.Errorf("advancing run %s: %w", id, err)
		}
	}
	return nil
}

// openRunIDs lists every run not yet finished, oldest first: the runs a
// pass advances.
func (s *Service) openRunIDs(ctx context.Context) ([]string, error) {
	rows, err := s.pool.Query(ctx, `SELECT id FROM fleet_runs WHERE finished_at IS NULL ORDER BY created_at, id`)
	if err != nil {
		return nil, fmt.Errorf("listing open runs: %w", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("listing open runs: %w", err)
	}
	return ids, nil
}
