// Package sweeper is the CommandSweeper: the singleton that enforces the
// commands' deadlines on the control plane side. Every replica runs one;
// only the holder of the "command-sweeper" lease sweeps, every 5 seconds: a
// pending command past not_after becomes expired (reason not_after); a
// dispatched, acked or running one past not_after plus its kind's timeout
// becomes failed (reason timeout), with 15 minutes for a kind no longer
// registered. Each batch is guarded single statements (queue.Sweep, which
// also writes command.settled per command) in one transaction that first
// renews the lease, so an old leader whose term is gone commits nothing.
// After each batch the sweeper wakes the node's controller and the owner
// named by the idempotency key (wf:<workflowId>:… wakes that workflow).
package sweeper

import (
	"context"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/better-compute/commands/controlplane/commands/queue"
)

// LeaseName names the sweeper's row in leader_leases.
const LeaseName = "command-sweeper"

// Defaults.
const (
	DefaultInterval = 5 * time.Second
	DefaultBatch    = 1000
)

// dispatchChannel is the gateway's wake-up channel (migration 0002): a swept
// in-flight command gives its lane credit back, on whichever replica holds
// the node's session.
const dispatchChannel = "bc_dispatch"

// Options tune a sweeper.
type Options struct {
	// Interval between sweeps (DefaultInterval).
	Interval time.Duration
	// LeaseTTL is how long a term lasts without renewal (3 intervals).
	LeaseTTL time.Duration
	// Batch bounds the commands of each sort one statement moves (DefaultBatch).
	Batch int
	// Holder names this replica in leader_leases (host name and pid).
	Holder string
	// Nodes are the node controllers, woken with the node id.
	Nodes *Wakers
	// Workflows are the workflow owners, woken with the workflow id.
	Workflows *Wakers
	// Logger logs; null when nil.
	Logger hclog.Logger
	// OnSwept, when set, is told of each committed batch: the pending
	// commands it expired (not_after) and the in-flight ones it failed
	// (timeout). The server's metrics count them.
	OnSwept func(expired, timedOut []queue.Command)
}

// Sweeper is one replica's CommandSweeper.
type Sweeper struct {
	pool   *pgxpool.Pool
	queue  *queue.Queue
	opts   Options
	lease  *Lease
	logger hclog.Logger
	// leading is written by Run and read by Leading.
	leading atomic.Bool
	// sweepLock keeps Run's sweeps and a caller's from overlapping.
	sweepLock sync.Mutex
}

// New builds a sweeper; Run starts it.
func New(pool *pgxpool.Pool, q *queue.Queue, opts Options) *Sweeper {
	if opts.Interval <= 0 {
		opts.Interval = DefaultInterval
	}
	if opts.LeaseTTL <= 0 {
		opts.LeaseTTL = 3 * opts.Interval
	}
	if opts.Batch <= 0 {
		opts.Batch = DefaultBatch
	}
	if opts.Holder == "" {
		host, _ := os.Hostname()
		opts.Holder = fmt.Sprintf("%s/%d", host, os.Getpid())
	}
	if opts.Logger == nil {
		opts.Logger = hclog.NewNullLogger()
	}
	s := &Sweeper{pool: pool, queue: q, opts: opts, logger: opts.Logger.Named("sweeper").With("holder", opts.Holder)}
	s.lease = NewLease(pool, LeaseName, opts.Holder, opts.LeaseTTL)
	return s
}

// Leading reports whether this replica held the lease at its last tick.
func (s *Sweeper) Leading() bool { return s.leading.Load() }

func (s *Sweeper) setLeading(v bool) { s.leading.Store(v) }

// Run elects, sweeps and renews every Interval until ctx ends, then resigns.
func (s *Sweeper) Run(ctx context.Context) {
	t := time.NewTicker(s.opts.Interval)
	defer t.Stop()
	for {
		s.tick(ctx)
		select {
		case <-ctx.Done():
			if s.lease.Term() != "" {
				rctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				if err := s.lease.Resign(rctx); err != nil {
					s.logger.Warn("resigning", "error", err)
				} else {
					s.logger.Info("resigned")
				}
				cancel()
			}
			s.setLeading(false)
			return
		case <-t.C:
		}
	}
}

// tick is one round: step down when the term is no longer trusted, elect
// when not leading, sweep when leading.
func (s *Sweeper) tick(ctx context.Context) {
	if s.lease.Term() != "" && !s.lease.Held(time.Now()) {
		s.logger.Warn("term no longer trusted; stepping down", "term", s.lease.Term())
		s.lease.StepDown()
	}
	if s.lease.Term() == "" {
		won, err := s.lease.Elect(ctx)
		if err != nil {
			if ctx.Err() == nil {
				s.logger.Warn("election failed", "error", err)
			}
			s.setLeading(false)
			return
		}
		if !won {
			s.setLeading(false)
			return
		}
		s.logger.Info("elected", "term", s.lease.Term())
	}
	s.setLeading(true)
	if _, err := s.Sweep(ctx); err != nil && ctx.Err() == nil {
		s.logger.Warn("sweep failed", "error", err)
	}
	if s.lease.Term() == "" {
		s.setLeading(false)
	}
}

// Sweep runs batches under the current term until one moves fewer than
// Batch commands of each sort, and returns how many commands it settled.
// It stops, settling nothing more, as soon as the term cannot be renewed.
func (s *Sweeper) Sweep(ctx context.Context) (int, error) {
	s.sweepLock.Lock()
	defer s.sweepLock.Unlock()
	total := 0
	for {
		var expired, failed []queue.Command
		renewed := false
		err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
			ok, err := s.lease.Renew(ctx, tx)
			if err != nil || !ok {
				return err
			}
			renewed = true
			if expired, failed, err = s.queue.Sweep(ctx, tx, s.opts.Batch); err != nil {
				return err
			}
			if len(failed) > 0 {
				nodes := make([]string, 0, len(failed))
				for _, c := range failed {
					nodes = append(nodes, c.NodeID)
				}
				_, err = tx.Exec(ctx, `SELECT pg_notify('`+dispatchChannel+`', n) FROM (SELECT DISTINCT unnest($1::text[]) AS n) d`, nodes)
			}
			return err
		})
		if err != nil {
			// The renewal may not have committed: trust the term no more.
			s.lease.StepDown()
			return total, fmt.Errorf("sweeping: %w", err)
		}
		if !renewed {
			s.logger.Warn("term lost; stepping down")
			return total, nil
		}
		if s.opts.OnSwept != nil && len(expired)+len(failed) > 0 {
			s.opts.OnSwept(expired, failed)
		}
		for _, c := range expired {
			s.wake(ctx, c)
		}
		for _, c := range failed {
			s.wake(ctx, c)
		}
		total += len(expired) + len(failed)
		if len(expired)+len(failed) > 0 {
			s.logger.Info("swept", "expired", len(expired), "failed", len(failed))
		}
		if len(expired) < s.opts.Batch && len(failed) < s.opts.Batch {
			return total, nil
		}
	}
}

func (s *Sweeper) wake(ctx context.Context, c queue.Command) {
	s.opts.Nodes.Wake(ctx, c.NodeID)
	s.opts.Workflows.Wake(ctx, WorkflowOf(c.IdempotencyKey))
}
