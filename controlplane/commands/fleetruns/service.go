package fleetruns

import (
	"context"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/better-compute/commands/controlplane/commands/batches"
	"github.com/better-compute/commands/controlplane/commands/queue"
)

// Service creates, reads and controls fleet runs, and advances them (the
// Advancer runs its passes where this process leads).
type Service struct {
	pool   *pgxpool.Pool
	q      *queue.Queue
	quorum func() batches.Quorum
	logger hclog.Logger
	now    func() time.Time
	// prepare completes a target's command before it is queued; nil for
	// none.
	prepare func(ctx context.Context, p *queue.EnqueueParams) error
	// wake, buffered by one, asks this process's advancer for a pass now:
	// a run created or controlled here needs no NOTIFY round trip.
	wake chan struct{}
}

// Options configure a Service.
type Options struct {
	// Quorum returns the batch quorum in force (approver keys), read at
	// each destructive run's creation; nil is none (audit-only batches).
	Quorum func() batches.Quorum
	Logger hclog.Logger
	// Now is the clock (time.Now).
	Now func() time.Time
	// Prepare, when set, completes each target's command before it is
	// queued (the server presigns a logs.collect upload per node there, as
	// commands.run does); an error fails the pass, which is retried.
	Prepare func(ctx context.Context, p *queue.EnqueueParams) error
}

// New returns a Service on pool and q.
func New(pool *pgxpool.Pool, q *queue.Queue, opts Options) *Service {
	if opts.Logger == nil {
		opts.Logger = hclog.NewNullLogger()
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Quorum == nil {
		opts.Quorum = func() batches.Quorum { return batches.Quorum{} }
	}
	return &Service{pool: pool, q: q, quorum: opts.Quorum, logger: opts.Logger.Named("fleetruns"), now: opts.Now,
		prepare: opts.Prepare, wake: make(chan struct{}, 1)}
}

// Wake asks this process's advancer for a pass (a no-op when one is
// already asked for).
func (s *Service) Wake() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}
