// Package api implements the public gRPC API (bc.api.v1): Commands (run,
// get, list, cancel), Events (a resumable watch over the outbox) and Nodes.
// Authentication happens in the auth interceptors before a handler runs;
// every handler authorises against the request's tenant and node, and every
// error leaves as a gRPC status with an ErrorInfo (package apierr).
package api

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/better-compute/commands/controlplane/commands/batches"
	"github.com/better-compute/commands/controlplane/internal/errcode"
	"github.com/better-compute/commands/controlplane/internal/pgtx"

	"github.com/hashicorp/go-hclog"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/better-compute/commands/controlplane/commands/bundles"
	"github.com/better-compute/commands/controlplane/commands/events"
	"github.com/better-compute/commands/controlplane/commands/fleetruns"
	"github.com/better-compute/commands/controlplane/commands/queue"
	"github.com/better-compute/commands/controlplane/fleet/nodes"
	"github.com/better-compute/commands/controlplane/front/join"
	"github.com/better-compute/commands/controlplane/internal/apierr"
	"github.com/better-compute/commands/controlplane/internal/dbhealth"
	"github.com/better-compute/commands/controlplane/internal/groupcommit"
	"github.com/better-compute/commands/controlplane/internal/ids"
	"github.com/better-compute/commands/controlplane/trust/auth"
	"github.com/better-compute/commands/controlplane/trust/secrets"
	apiv1 "github.com/better-compute/commands/proto/bc/api/v1"
)

// DefaultAllowlist is the kinds commands.run accepts: any other kind is
// UNSUPPORTED, and so is an allowlisted kind whose manifest is not
// API-runnable or that is not registered.
var DefaultAllowlist = []string{"diag.nvml", "inventory.refresh", "logs.collect", "node.reboot"}

// The bounds of notAfterSeconds.
const (
	MinNotAfterSeconds     = 10
	MaxNotAfterSeconds     = 3600
	DefaultNotAfterSeconds = 600
)

// Config is what the API needs.
type Config struct {
	// Pool is the control plane's database.
	Pool *pgxpool.Pool
	// Queue is the command queue; its registry holds the kinds.
	Queue *queue.Queue
	// Logger is the API's logger.
	Logger hclog.Logger
	// Allowlist overrides DefaultAllowlist.
	Allowlist []string
	// Bundles is the supportBundles service; nil when the server has none,
	// and then commands.run refuses logs.collect (no upload destination).
	Bundles *bundles.Bundles
	// Join creates join tokens for nodes.createJoinToken; nil when the
	// server runs no gateway, and then that call is UNSUPPORTED.
	Join *join.Service
	// Quorum is the destructive-batch quorum (the approver keys of the trust
	// bundle and the threshold); nil or empty keys: batches are recorded for
	// audit only and their commands go out at once.
	Quorum func() batches.Quorum
	// WatchPoll is how often a watch re-reads the outbox without a NOTIFY;
	// events.DefaultPoll when zero.
	WatchPoll time.Duration
	// MaxWatchesPerIdentity bounds the event watches one identity holds
	// open on this server at once; DefaultMaxWatchesPerIdentity when zero,
	// no bound when negative.
	MaxWatchesPerIdentity int
	// Now is the clock; time.Now when nil.
	Now func() time.Time
	// Tracer records commands.run's spans (the command's trace starts
	// there); none when nil.
	Tracer trace.Tracer
	// Secrets is the secret store behind the Secrets service (secrets put,
	// list, delete); nil when the server holds no secrets key, and then
	// the service is not served.
	Secrets secrets.Store
	// RunGroup tunes how concurrent commands.run calls share commits
	// (groupcommit's defaults when zero).
	RunGroup groupcommit.Options
	// FleetRuns is the fleet-run service behind the FleetRuns API; nil
	// answers UNSUPPORTED.
	FleetRuns *fleetruns.Service
}

// Server holds the three services.
type Server struct {
	// workers are the goroutines Start begins (Wait waits for them).
	workers sync.WaitGroup
	// secrets is the secret store behind the Secrets service; nil serves
	// none (UNIMPLEMENTED).
	secrets   secrets.Store
	pool      *pgxpool.Pool
	queue     *queue.Queue
	logger    hclog.Logger
	allowlist map[string]bool
	// quorumKeys is Config.Quorum.
	quorumKeys func() batches.Quorum
	bundles    *bundles.Bundles
	join       *join.Service
	poll       time.Duration
	now        func() time.Time
	hub        *hub
	outage     *dbhealth.Outage
	watches    *watchLimit
	// done closes when the context given to Start ends: watches then end
	// with UNAVAILABLE so that their clients resume on another replica.
	done chan struct{}
	// tracer starts commands.run's spans.
	tracer trace.Tracer
	// group shares commands.run's commits among concurrent callers, and
	// runs enqueues the group's commands in a few statements for all of
	// them (queue.EnqueueSet).
	group *groupcommit.Committer
	runs  *groupcommit.Set[queue.EnqueueParams, queue.EnqueueOutcome]
	// fleet is the fleet-run service; nil serves none.
	fleet *fleetruns.Service
}

// New builds the API server. Call Start before serving Events.Watch.
func New(cfg Config) *Server {
	logger := cfg.Logger
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	allow := cfg.Allowlist
	if allow == nil {
		allow = DefaultAllowlist
	}
	s := &Server{
		pool: cfg.Pool, queue: cfg.Queue, logger: logger.Named("api"),
		allowlist: map[string]bool{}, quorumKeys: cfg.Quorum, bundles: cfg.Bundles, join: cfg.Join, poll: cfg.WatchPoll, now: cfg.Now,
		hub: newHub(), watches: newWatchLimit(cfg.MaxWatchesPerIdentity), done: make(chan struct{}),
		tracer: cfg.Tracer, secrets: cfg.Secrets, fleet: cfg.FleetRuns,
	}
	if cfg.RunGroup.Begin == nil {
		cfg.RunGroup.Begin = pgtx.Begin
	}
	if cfg.RunGroup.Workers == 0 {
		// One group in flight, and the callers that arrive meanwhile wait
		// for it and go out together as the next: a group costs the
		// database a fixed share whatever its size, so large groups are
		// what makes commands.run cheaper than a transaction a command.
		// A second group starts beside one that has run for 10 ms (a row
		// lock, a slow commit), so one held-up group does not hold every
		// caller. BenchmarkRunThroughput, 8 clients: 3.9 runs a commit and
		// 0.80-0.85 of the ceiling, against 2.2 and 0.70-0.72 with two
		// groups always free to run at once (and 0.38 with four).
		cfg.RunGroup.Workers = 2
		if cfg.RunGroup.Spill == 0 {
			cfg.RunGroup.Spill = 10 * time.Millisecond
		}
	}
	s.group = groupcommit.New(cfg.Pool, cfg.RunGroup)
	s.runs = groupcommit.NewSet(s.group, func(ctx context.Context, tx pgx.Tx, ps []queue.EnqueueParams) ([]queue.EnqueueOutcome, error) {
		return s.queue.EnqueueSet(ctx, tx, ps)
	})
	if s.tracer == nil {
		s.tracer = noop.NewTracerProvider().Tracer("")
	}
	// One outage log for the API's requests: the first that cannot reach
	// the database logs, the rest count, and the first to reach it again
	// logs the end.
	s.outage = dbhealth.New(s.logger, "API requests fail with UNAVAILABLE", dbhealth.ByOperation())
	for _, k := range allow {
		s.allowlist[k] = true
	}
	if s.now == nil {
		s.now = time.Now
	}
	if s.poll <= 0 {
		s.poll = events.DefaultPoll
	}
	return s
}

// Start runs the one outbox listener that wakes every watch, until ctx ends.
func (s *Server) Start(ctx context.Context) {
	wake := events.Listen(ctx, s.pool, s.poll, s.logger)
	s.workers.Go(func() { s.hub.run(wake) }) // ends when the listener closes wake
	s.workers.Go(func() {
		<-ctx.Done()
		close(s.done)
	})
}

// Wait returns once the goroutines Start began have ended (after its
// context did): the event listener's connection is back in the pool, which
// the caller may close then.
func (s *Server) Wait() { s.workers.Wait() }

// Register adds the Commands, Events and Nodes services to g.
func (s *Server) Register(g grpc.ServiceRegistrar) {
	apiv1.RegisterCommandsServer(g, &commandsServer{s: s})
	apiv1.RegisterEventsServer(g, &eventsServer{s: s})
	apiv1.RegisterNodesServer(g, &nodesServer{s: s})
	apiv1.RegisterCommandBatchesServer(g, &batchesServer{s: s})
	apiv1.RegisterFleetRunsServer(g, &fleetRunsServer{s: s})
	apiv1.RegisterPoolsServer(g, &poolsServer{s: s})
	apiv1.RegisterRolloutsServer(g, &rolloutsServer{s: s})
	apiv1.RegisterReconcilerServer(g, &reconcilerServer{s: s})
	apiv1.RegisterFleetServer(g, &fleetServer{s: s})
	apiv1.RegisterKindsServer(g, &kindsServer{s: s})
	// EXTEND HERE: the Secrets service, when the server holds a store.
	if s.secrets != nil {
		apiv1.RegisterSecretsServer(g, &secretsServer{s: s})
	}
}

// lookupNode tells auth which tenant owns a node.
func (s *Server) lookupNode(ctx context.Context, nodeID string) (string, bool, error) {
	n, err := s.queue.GetNode(ctx, s.pool, "", nodeID)
	if errcode.CodeOf(err) == errcode.NotFound {
		s.outage.OK()
		return "", false, nil
	}
	if err != nil {
		return "", false, s.fail(ctx, "looking up node", err)
	}
	s.outage.OK()
	return n.TenantID, true, nil
}

// lookupNodeHistory is lookupNode for reading a node's commands, which
// include a deleted node's: its commands' history (how they ended, reason
// node-deleted) outlives it.
func (s *Server) lookupNodeHistory(ctx context.Context, nodeID string) (string, bool, error) {
	tenantID, ok, err := nodes.TenantOf(ctx, s.pool, nodeID)
	if err != nil {
		return "", false, s.fail(ctx, "looking up node", err)
	}
	s.outage.OK()
	return tenantID, ok, nil
}

// fail turns any error into an API status: a queue refusal keeps its code,
// reason and details; a lost database (and only that) is UNAVAILABLE,
// logged once per outage rather than once per request; a value PostgreSQL
// refuses as data is INVALID_INPUT; anything else is INTERNAL, logged with
// an error id that the caller gets too, so that an operator finds the one
// log line a user reports, while the error's own text, which may name
// internals, stays in the log.
func (s *Server) fail(ctx context.Context, op string, err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	var qe *errcode.Error
	if errors.As(err, &qe) {
		details := map[string]string{}
		for k, v := range qe.Details {
			details[k] = v
		}
		if _, set := details["reason"]; !set && qe.Reason != "" {
			details["reason"] = qe.Reason
		}
		return apierr.New(errcode.Code(qe.Code), qe.Message, details)
	}
	switch {
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, op+": cancelled")
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, op+": deadline exceeded")
	case ctx.Err() != nil:
		return status.FromContextError(ctx.Err()).Err()
	case errors.Is(err, pgtx.ErrCommitUnknown):
		// The connection went while COMMIT was on its way with the
		// group's last statement: the work may be stored.
		s.outage.Failed(op, err)
		return apierr.New(errcode.Unavailable, op+": the database connection was lost while committing, so it may have been stored; "+
			"retry with the same idempotency key (a retry returns the command if it was queued), or list the node's commands", map[string]string{"reason": "commit-unknown"})
	case dbhealth.Unreachable(err):
		s.outage.Failed(op, err)
		return apierr.New(errcode.Unavailable, op+": the database is unavailable; retry", nil)
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		// The database answered: whatever the outage was, it is over.
		s.outage.OK()
		if pe.Code == "40P01" || pe.Code == "40001" {
			// A deadlock or serialization failure rolled the work back
			// whole: the same call again is safe.
			return apierr.New(errcode.Unavailable, op+": the database rolled this back to resolve a conflict with concurrent work; retry",
				map[string]string{"reason": "retry-conflict"})
		}
		if pe.Code[:2] == "22" {
			// A data exception: a value the API's own checks let through
			// (they name the field; this is the backstop).
			return apierr.New(errcode.InvalidInput, op+": a value is malformed or out of range: "+pe.Message,
				map[string]string{"reason": "invalid-value"})
		}
	}
	errID := ids.New(errorPrefix)
	s.logger.Error("internal error", "op", op, "error_id", errID, "error", err)
	return apierr.New(errcode.Internal, op+": internal error (error id "+errID+"; the server log has it)",
		map[string]string{"errorId": errID})
}

// errorPrefix starts the id of an INTERNAL error.
const errorPrefix ids.Prefix = "err_"

// identity returns the authenticated caller.
func identity(ctx context.Context) (*auth.Identity, error) {
	id, ok := auth.FromContext(ctx)
	if !ok {
		return nil, apierr.Errorf(errcode.Unauthenticated, "no authenticated identity")
	}
	return id, nil
}

// hub fans the single outbox listener out to every watch.
type hub struct {
	// mu guards subs.
	mu   sync.Mutex
	subs map[chan struct{}]struct{}
}

func newHub() *hub { return &hub{subs: map[chan struct{}]struct{}{}} }

func (h *hub) run(wake <-chan struct{}) {
	for range wake {
		h.mu.Lock()
		for c := range h.subs {
			select {
			case c <- struct{}{}:
			default:
			}
		}
		h.mu.Unlock()
	}
}

func (h *hub) subscribe() (<-chan struct{}, func()) {
	c := make(chan struct{}, 1)
	h.mu.Lock()
	h.subs[c] = struct{}{}
	h.mu.Unlock()
	return c, func() {
		h.mu.Lock()
		delete(h.subs, c)
		h.mu.Unlock()
	}
}
