// Package wakes delivers the module API's owner wakes durably: "Each
// transition wakes … the owner named by the idempotency key (wf:<workflowId>:…
// wakes that workflow)". The transaction that settles a command (the
// gateway's report, a reconnect's settle, the sweeper, a cancel, a node's
// deletion: queue.OnSettle) inserts a River job for the command's owner with
// InsertManyTx in that same transaction, so the wake exists exactly when
// the settle does and survives a control plane killed right after it.
// River delivers it at least once to the waker registered for the key's
// prefix: a waker that fails, or a process killed while one runs, leaves the
// job to be retried (River's retry policy, its rescuer for a job left
// running). River's NOTIFY is only a hint; its poll finds the job anyway.
//
// Commands stay in their own table: River carries the wakes and the
// modules' own jobs, never commands.
package wakes

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/better-compute/commands/controlplane/commands/queue"
	"github.com/better-compute/commands/internal/hclogslog"
)

// Queue is the River queue the owner wakes run on.
const Queue = "bc_owner_wakes"

// JobKind is the River kind of an owner wake.
const JobKind = "bc.owner_wake"

// DefaultMaxAttempts bounds the deliveries of one wake whose waker keeps
// failing (River's exponential backoff spreads 25 attempts over weeks).
const DefaultMaxAttempts = 25

// Args is one owner wake: the settled command, as the waker needs it.
type Args struct {
	// Key is the command's idempotency key, which names the owner.
	Key string `json:"key"`
	// CommandID, NodeID, CommandKind, State and Reason are the settled
	// command's.
	CommandID   string `json:"commandId"`
	NodeID      string `json:"nodeId"`
	CommandKind string `json:"kind"`
	State       string `json:"state"`
	Reason      string `json:"reason,omitempty"`
}

// Kind is River's name for the job.
func (Args) Kind() string { return JobKind }

// InsertOpts puts wakes on their own queue.
func (Args) InsertOpts() river.InsertOpts {
	return river.InsertOpts{Queue: Queue, MaxAttempts: DefaultMaxAttempts}
}

// Wake is what a waker is told: the settled command and the owner its key
// names.
type Wake struct {
	// Owner is the owner the key names: "wf:<workflowId>" for a workflow
	// step, "acceptance:<nodeId>" for an acceptance run, else the
	// registered prefix that matched.
	Owner string
	Args
	// Attempt counts this wake's deliveries, from 1.
	Attempt int
}

// Waker handles the wakes of the keys it registered for. It must be
// idempotent: a wake is delivered at least once. An error asks for the
// wake again later.
type Waker interface {
	Wake(ctx context.Context, w Wake) error
}

// WakerFunc adapts a function to Waker.
type WakerFunc func(ctx context.Context, w Wake) error

// Wake calls f.
func (f WakerFunc) Wake(ctx context.Context, w Wake) error { return f(ctx, w) }

// OwnerOf names the owner of an idempotency key: "wf:<workflowId>" for
// "wf:<workflowId>:<stepId>[:<attempt>]", "acceptance:<nodeId>" for
// "acceptance:<nodeId>:<attempt>:<kind>", and "" for any other key (the
// API's api:… keys own nothing).
func OwnerOf(key string) string {
	for _, scheme := range []string{"wf:", "acceptance:"} {
		rest, ok := strings.CutPrefix(key, scheme)
		if !ok {
			continue
		}
		id, _, _ := strings.Cut(rest, ":")
		if id == "" {
			return ""
		}
		return scheme + id
	}
	return ""
}

// Options configure a Service.
type Options struct {
	// Workers are the modules' own River workers, added beside the wake
	// worker; nil for none.
	Workers *river.Workers
	// Queues are the modules' own River queues beside Queue.
	Queues map[string]river.QueueConfig
	// MaxWorkers bounds the wakes handled at once (10).
	MaxWorkers int
	// JobTimeout bounds one waker's run (1 minute).
	JobTimeout time.Duration
	// RescueAfter is how long a wake may stay running (its process killed
	// mid-run) before River runs it again (5 minutes; above JobTimeout).
	RescueAfter time.Duration
	// FetchPollInterval is River's poll, the fallback to its NOTIFY (1 s).
	FetchPollInterval time.Duration
	// Logger logs; null when nil.
	Logger hclog.Logger
	// KeepFinishedJobs turns River's own job cleaner off (it deletes
	// finished jobs after a day, discarded ones after a week, archiving
	// nothing): with history retention on, the history archiver archives
	// them, then deletes them.
	KeepFinishedJobs bool
}

// Service records wakes in settling transactions and runs the wakers.
type Service struct {
	reg    *Registry
	client *river.Client[pgx.Tx]
	logger hclog.Logger
}

// New builds the River client on pool, with the wake worker bound to reg.
// Record works at once; Start runs the wakers (and the modules' workers) in
// this process.
func New(pool *pgxpool.Pool, reg *Registry, opts Options) (*Service, error) {
	if opts.Logger == nil {
		opts.Logger = hclog.NewNullLogger()
	}
	if opts.MaxWorkers <= 0 {
		opts.MaxWorkers = 10
	}
	if opts.JobTimeout <= 0 {
		opts.JobTimeout = time.Minute
	}
	if opts.RescueAfter <= opts.JobTimeout {
		opts.RescueAfter = max(5*time.Minute, 2*opts.JobTimeout)
	}
	workers := opts.Workers
	if workers == nil {
		workers = river.NewWorkers()
	}
	s := &Service{reg: reg, logger: opts.Logger.Named("wakes")}
	if err := river.AddWorkerSafely(workers, &wakeWorker{s: s}); err != nil {
		return nil, fmt.Errorf("registering the owner-wake worker: %w", err)
	}
	queues := map[string]river.QueueConfig{Queue: {MaxWorkers: opts.MaxWorkers}}
	for name, q := range opts.Queues {
		queues[name] = q
	}
	keep := time.Duration(0)
	if opts.KeepFinishedJobs {
		keep = -1 // River: never delete
	}
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		CompletedJobRetentionPeriod: keep,
		CancelledJobRetentionPeriod: keep,
		DiscardedJobRetentionPeriod: keep,
		Queues:                      queues,
		Workers:                     workers,
		JobTimeout:                  opts.JobTimeout,
		RescueStuckJobsAfter:        opts.RescueAfter,
		FetchPollInterval:           opts.FetchPollInterval,
		Logger:                      hclogslog.New(s.logger.Named("river")),
	})
	if err != nil {
		return nil, fmt.Errorf("river client: %w", err)
	}
	s.client = client
	return s, nil
}

// Client is the River client, on which modules insert their own jobs in
// their transactions (InsertTx).
func (s *Service) Client() *river.Client[pgx.Tx] { return s.client }

// Registry is the wakers' registry.
func (s *Service) Registry() *Registry { return s.reg }

// Start runs the wakers until Stop. Only a process that runs the modules
// needs it; every process that settles commands records wakes without it.
func (s *Service) Start(ctx context.Context) error {
	if err := s.client.Start(ctx); err != nil {
		return fmt.Errorf("starting river: %w", err)
	}
	return nil
}

// Stop waits for the running wakers to finish (until ctx ends).
func (s *Service) Stop(ctx context.Context) error { return s.client.Stop(ctx) }

// Hook is the queue's settle hook (queue.OnSettle): it records a wake, in
// the settling transaction, for each settled command whose key names an
// owner (OwnerOf) or starts with a registered prefix.
func (s *Service) Hook() queue.SettleHook { return s.Record }

// Record inserts the wakes of settled in tx.
func (s *Service) Record(ctx context.Context, tx pgx.Tx, settled []queue.Command) error {
	var params []river.InsertManyParams
	for _, c := range settled {
		if !s.reg.Wakes(c.IdempotencyKey) {
			continue
		}
		params = append(params, river.InsertManyParams{Args: Args{Key: c.IdempotencyKey, CommandID: c.ID, NodeID: c.NodeID,
			CommandKind: c.Kind, State: string(c.State), Reason: c.Reason}})
	}
	if len(params) == 0 {
		return nil
	}
	if _, err := s.client.InsertManyTx(ctx, tx, params); err != nil {
		return fmt.Errorf("inserting %d owner wake(s): %w", len(params), err)
	}
	return nil
}

// wakeWorker runs one wake: the registered waker of its key.
type wakeWorker struct {
	river.WorkerDefaults[Args]
	s *Service
}

// Work delivers the wake; an error (no waker, or the waker's) retries it.
func (w *wakeWorker) Work(ctx context.Context, job *river.Job[Args]) error {
	waker, owner, ok := w.s.reg.Lookup(job.Args.Key)
	if !ok {
		return fmt.Errorf("no module registered a waker for key %q (owner %q): the wake waits for one", job.Args.Key, OwnerOf(job.Args.Key))
	}
	err := waker.Wake(ctx, Wake{Owner: owner, Args: job.Args, Attempt: job.Attempt})
	if err != nil {
		w.s.logger.Warn("waker failed; the wake is retried", "key", job.Args.Key, "command_id", job.Args.CommandID, "attempt", job.Attempt, "error", err)
		return fmt.Errorf("waking %s for %s: %w", owner, job.Args.CommandID, err)
	}
	return nil
}
