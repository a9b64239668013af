// Package gateway holds each node's session: one gRPC bidirectional stream
// (bc.agent.v1.Session) over mTLS. It settles what a reconnect proves,
// replays every open command in seq order, dispatches pending commands
// within the lane credits as the exact bytes stored at enqueue, relays
// cancels until the node reports a terminal state, pushes the node spec,
// and lands the node's reports as guarded transitions fenced by session
// epoch, acknowledging each only once it is stored: a report that finds
// the database away is held and retried, and the outage is logged once.
// The gateway runs no SQL of its own (the queue holds it) and keeps no
// state beyond its sessions: replicas scale out against one PostgreSQL.
package gateway

import (
	"context"
	"crypto/x509"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/better-compute/commands/controlplane/commands/queue"
	"github.com/better-compute/commands/controlplane/internal/dbhealth"
	"github.com/better-compute/commands/controlplane/internal/groupcommit"
	"github.com/better-compute/commands/controlplane/internal/ids"
	"github.com/better-compute/commands/controlplane/internal/pgtx"
	agentv1 "github.com/better-compute/commands/proto/bc/agent/v1"
	"github.com/better-compute/commands/sdk/kind"
)

// DefaultCredits are the spec's lane credits per session: "at most 8
// control, 4 provision and 2 bulk commands outstanding per session".
var DefaultCredits = map[kind.Lane]int{kind.LaneControl: 8, kind.LaneProvision: 4, kind.LaneBulk: 2}

// Options tune a gateway.
type Options struct {
	// Secrets answers the nodes' SecretRequests (controlplane/trust/secrets);
	// nil answers each with secrets-unavailable.
	Secrets SecretExchanger
	// Credits per lane; DefaultCredits when nil.
	Credits map[kind.Lane]int
	// Poll is the fallback wake-up when no NOTIFY arrives (default 2s), for
	// a session whose last read found a pending command or a cancel to
	// resend; any other session waits for a wake-up (waitsForWake) and
	// holds no timer (needsTick). The gateway also looks for a newer trust
	// bundle every Poll, for all its sessions (watchTrust).
	Poll time.Duration
	// IdlePoll is how often the gateway reads, in one statement for
	// thousands of its sessions, which of their nodes have open commands,
	// and wakes those sessions (default 30s): the fallback for a session
	// whose last read found none, or only commands in flight, which does
	// not poll on its own. Only a
	// lost NOTIFY could leave such a session work, and a reconnected
	// listener wakes every session anyway. A poll of each idle session
	// cost 330 reads a second at 10,000 sessions, and a quarter of the
	// gateway's idle CPU (BenchmarkSessions, its idle profile).
	IdlePoll time.Duration
	// CancelResend is how often Cancel is sent again until the node reports
	// a terminal state (default 2s).
	CancelResend time.Duration
	// BusyBackoffMin and BusyBackoffMax bound BUSY's backoff (1s, 30s).
	BusyBackoffMin, BusyBackoffMax time.Duration
	// Now is the clock (tests).
	Now func() time.Time
	// TrustBundle is where Welcome's trust bundle comes from (the newest
	// published one); nil sends none. The gateway relays it as signed.
	TrustBundle BundleSource
	// NodeCA verifies the node certificates behind attested bindings.
	NodeCA *x509.CertPool
	// OnSettled, when set, is called after a node's report settled a
	// command (the server checks a logs.collect bundle against the blob
	// store there). It runs on the session's goroutine: keep it short.
	OnSettled func(ctx context.Context, c queue.Command)
	// Observer is told of credits, dispatches and reports (the server's
	// metrics); none when nil.
	Observer Observer
	// Tracer records the dispatch and settle spans in each command's trace
	// (its stored trace_parent); none when nil.
	Tracer trace.Tracer
	// Group tunes how sessions share commits: node reports and dispatches
	// of many sessions are stored in one transaction, each acknowledged (or
	// sent) once its group committed. The defaults suit one gateway of
	// 10,000 nodes on a pool of 32 connections.
	Group groupcommit.Options
	// Name names this gateway in the node rows of the sessions it holds
	// (nodes.get and nodes.list show it); the host name when empty.
	Name string
	// Shed tunes how this gateway evens out its load with the others on
	// the same database (shed.go).
	Shed ShedOptions
}

func (o *Options) defaults() {
	if o.Credits == nil {
		o.Credits = DefaultCredits
	}
	if o.Poll <= 0 {
		o.Poll = 2 * time.Second
	}
	if o.IdlePoll <= 0 {
		o.IdlePoll = 30 * time.Second
	}
	if o.CancelResend <= 0 {
		o.CancelResend = 2 * time.Second
	}
	if o.BusyBackoffMin <= 0 {
		o.BusyBackoffMin = time.Second
	}
	if o.BusyBackoffMax <= 0 {
		o.BusyBackoffMax = 30 * time.Second
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Name == "" {
		o.Name, _ = os.Hostname()
	}
	if o.Observer == nil {
		o.Observer = nopObserver{}
	}
	o.Shed.defaults()
	if o.Tracer == nil {
		o.Tracer = noop.NewTracerProvider().Tracer("")
	}
}

// BundleSource hands out the newest published trust bundle (nil when none
// was published); trustbundle.Source implements it.
type BundleSource interface {
	Current(ctx context.Context) (*agentv1.TrustBundle, error)
}

// Gateway serves bc.agent.v1.Session.
type Gateway struct {
	agentv1.UnimplementedSessionServer
	pool   *pgxpool.Pool
	queue  *queue.Queue
	logger hclog.Logger
	opts   Options
	hub    *hub
	outage *dbhealth.Outage
	// group stores sessions' reports and dispatches in shared transactions.
	group *groupcommit.Committer
	// transitions is the group's set of transitions: a group's dispatches
	// and reports go to the database as one statement (queue.TransitionSet).
	transitions *groupcommit.Set[queue.Transition, queue.TransitionResult]
	// lister reads sessions' open commands in shared statements.
	lister *lister
	// tracingOff says Options.Tracer is the no-op one: the gateway then
	// builds no span at all (startSpan).
	tracingOff bool
	// id is this process's row in the gateways table (shed.go).
	id string
	// shed counts the sessions this gateway ended to even out the load.
	shed atomic.Int64
	// lastSeen is when each live gateway last wrote its row, as the last
	// round of balance read it when that round found an excess; nil
	// otherwise (only balance's goroutine touches it).
	lastSeen map[string]time.Time

	// statsLock guards maxOutstanding and dispatched.
	statsLock      sync.Mutex
	maxOutstanding map[string]map[kind.Lane]int
	dispatched     int64
}

// New builds a gateway. Call Run to start its wake-up listener.
func New(pool *pgxpool.Pool, q *queue.Queue, logger hclog.Logger, opts Options) *Gateway {
	opts.defaults()
	logger = logger.Named("gateway")
	if opts.Group.Begin == nil {
		// A group's BEGIN goes with its statement: one round trip less
		// between a commit and the node receiving its command.
		opts.Group.Begin = pgtx.Begin
	}
	group := groupcommit.New(pool, opts.Group)
	return &Gateway{
		pool:   pool,
		queue:  q,
		logger: logger,
		opts:   opts,
		hub:    newHub(),
		outage: newOutage(logger),
		group:  group,
		lister: newLister(pool, q),
		transitions: groupcommit.NewSet(group, func(ctx context.Context, tx pgx.Tx, ts []queue.Transition) ([]queue.TransitionResult, error) {
			return q.TransitionSet(ctx, tx, ts)
		}),
		maxOutstanding: map[string]map[kind.Lane]int{},
		tracingOff:     isNoopTracer(opts.Tracer),
		id:             ids.New(ids.Gateway),
	}
}

// Run listens for dispatch wake-ups, sweeps the idle sessions every
// IdlePoll, looks for a newer trust bundle every Poll, and records its
// session count and sheds what it holds beyond its share every
// Shed.Every, until ctx ends.
func (g *Gateway) Run(ctx context.Context) {
	var wg sync.WaitGroup
	wg.Go(func() { g.sweepIdle(ctx) })
	wg.Go(func() { g.watchTrust(ctx) })
	wg.Go(func() { g.balance(ctx) })
	g.hub.listen(ctx, g.pool, g.logger, g.outage)
	wg.Wait() // nothing of the gateway's runs on once Run returned
}

// MaxOutstanding reports the most commands the gateway ever had outstanding
// at once in one lane of one node's sessions: its own credit accounting.
func (g *Gateway) MaxOutstanding(nodeID string) map[kind.Lane]int {
	g.statsLock.Lock()
	defer g.statsLock.Unlock()
	out := map[kind.Lane]int{}
	for l, n := range g.maxOutstanding[nodeID] {
		out[l] = n
	}
	return out
}

// Sessions is the number of sessions this gateway holds.
func (g *Gateway) Sessions() int { return g.hub.count() }

// IdleSessions is the number of sessions whose last read left them nothing
// to do on a timer (no open command, or only commands in flight): those
// that wait for a wake-up and do not poll (sweepIdle).
func (g *Gateway) IdleSessions() int {
	_, idle := g.hub.nodes()
	return len(idle)
}

func (g *Gateway) noteOutstanding(nodeID string, lane kind.Lane, n int) {
	g.statsLock.Lock()
	defer g.statsLock.Unlock()
	m := g.maxOutstanding[nodeID]
	if m == nil {
		m = map[kind.Lane]int{}
		g.maxOutstanding[nodeID] = m
	}
	if n > m[lane] {
		m[lane] = n
	}
	g.dispatched++
}
