// Package daemon is bcd's command runner: each command goes through the
// acceptance checks, the journal (synced to disk before it runs), its lane's
// worker pool and the plugin host, and its updates go back to whoever
// submitted it and to the daemon-wide subscribers (the session client).
// Duplicates are answered from the journal or re-attached to the running
// command; Recover settles what a crash left unfinished.
package daemon

import (
	"context"
	"crypto"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/better-compute/commands/bcd/accept"
	"github.com/better-compute/commands/bcd/journal"
	"github.com/better-compute/commands/bcd/lanes"
	"github.com/better-compute/commands/internal/trust"
	"github.com/better-compute/commands/sdk/kind"
)

// Executor runs kinds; *pluginhost.Host is the real one.
type Executor interface {
	// Manifests lists the loaded kinds.
	Manifests() []kind.Manifest
	// Manifest returns one loaded kind's manifest.
	Manifest(kind string) (kind.Manifest, bool)
	// Execute runs cmd and returns its terminal result, always; the error
	// says why the result was made up rather than reported by the plugin.
	Execute(ctx context.Context, cmd kind.Command, progress func(percent int, message string)) (kind.Result, error)
}

// SecretSource exchanges a command's secretRefs for their values. The
// values are in memory for the run only; the daemon wipes them after it.
type SecretSource interface {
	Fetch(ctx context.Context, commandID string, refs []string) (map[string][]byte, error)
}

// Errors returned by the daemon.
var (
	// ErrClosed is returned once Close has begun.
	ErrClosed = errors.New("daemon closed")
	// ErrNotFound is returned by Cancel for a command bcd never saw.
	ErrNotFound = errors.New("no such command")
)

// Config configures a daemon.
type Config struct {
	// NodeID and Role are the node's identity.
	NodeID string
	Role   string
	// AllowedKinds restricts a node whose certificate carries allowed
	// kinds; nil accepts every loaded kind its role allows.
	AllowedKinds []string
	// BootID is the current boot id; "" reads /proc/sys/kernel/random/boot_id.
	BootID string
	// Lanes are the worker counts per lane; zero sizes take the defaults.
	Lanes lanes.Sizes
	// Trust and Batches feed checks 4 and 5; nil passes them (no roots, no
	// approver keys).
	Trust   accept.Trust
	Batches accept.Batches
	// OnSpecRequest is called when a command needs a newer node spec than
	// the applied one (the session client sends SpecRequest).
	OnSpecRequest func(haveGeneration int64)
	// Clock is the node's view of server time, in which not_after is
	// judged; the session client feeds it each Welcome's server time and
	// check 4 raises its floor. A new Clock over Now when nil.
	Clock *trust.Clock
	// NodeKey is the node's key (the one its certificate names): it signs
	// the outcome of every attested kind. Nil sends them unsigned (a local
	// node that never joined).
	NodeKey crypto.Signer
	// CompactEvery is how often the journal is compacted; 1 h when 0.
	CompactEvery time.Duration
	// Now is the clock; time.Now when nil.
	Now func() time.Time
	// OnState, when set, is called for every state change the daemon
	// publishes (not progress steps, not duplicate answers): bcd's metrics
	// count commands by kind, state and reason there. Keep it cheap.
	OnState func(u Update)
	// Handoff settles the self-terminating kinds that restart bcd rather
	// than the node (daemon.upgrade); nil: none.
	Handoff Handoff
	// Secrets fetches a command's secretRefs over the session just before
	// its run (bcd/secrets.Exchanger); nil fails a command that names any
	// with secrets-unavailable.
	Secrets SecretSource
	// Tracer records each command's spans on the node (SpanCommand and its
	// children) under the envelope's trace_parent; none when nil.
	Tracer trace.Tracer
}

// Daemon runs commands. Its methods are safe for concurrent use.
type Daemon struct {
	logger  hclog.Logger
	cfg     Config
	journal *journal.Journal
	state   *State
	exec    Executor
	pool    *lanes.Pool
	bootID  string
	subs    subscribers

	// baseCtx parents every run; Close cancels it.
	baseCtx    context.Context
	baseCancel context.CancelFunc
	// runs counts the goroutines that run or wait for commands.
	runs sync.WaitGroup

	// lock guards active and closing, and each active entry's watchers,
	// last, rec, cancel and cancelRequested.
	//
	// Lock order: settleLock, then lock, then an entry's sendLock. lock is
	// released before sendLock is taken, never held across it: publish,
	// finish and abandon copy the watchers under lock, then send under
	// sendLock, and a state update's send waits for a slow watcher, which
	// Submit, Cancel and InFlight must not wait behind. Nothing takes lock
	// while holding sendLock (with the order above, a deadlock). The
	// journal's locks may be taken under lock (Submit's Get), never the
	// reverse; subs.lock is taken with neither held.
	// TestLockOrder_ASendThatWaitsNeverHoldsUpTheDaemonLock checks it.
	lock    sync.Mutex
	active  map[string]*entry
	closing bool

	compactDone chan struct{}

	// settleLock serialises SettleHandoff; it is taken before lock.
	settleLock sync.Mutex
}

// entry is a command bcd is working on: waiting for a spec, journaled and
// queued, or running. rec, watchers, last, cancel and cancelRequested are
// guarded by Daemon.lock, sendClosed by sendLock; the other fields belong
// to the goroutine at the command's current step (Submit, the wait for a
// spec, the lane worker), each handing the entry on to the next.
type entry struct {
	cmd      accept.Command
	manifest kind.Manifest
	rec      journal.Record
	watchers []*watcher
	// last is the latest state update, replayed to a duplicate that
	// re-attaches.
	last *Update
	// cancel stops the run; cancelRequested remembers a cancel that came
	// before the run started.
	cancel          context.CancelFunc
	cancelRequested bool
	// wake is closed to end a wait for the spec (a cancel).
	wake chan struct{}
	// sendLock is held while sending to or closing the watchers' channels,
	// so no send meets a closed channel; it guards sendClosed, set once
	// they are closed. It is taken after d.lock is released, never with it
	// (see Daemon.lock): a send may wait for a slow watcher. The one send
	// under d.lock instead is attach's replay to a new watcher, which
	// never waits (its buffer is empty) and which no publish or finish can
	// reach before d.lock is released.
	sendLock   sync.Mutex
	sendClosed bool
	// release frees the entry's lane worker slot; set by the lane job and
	// called before the outcome is published, so that whoever gets the
	// outcome can send the next command and find the lane free.
	release func()
	// traceCtx carries span, the command's span on the node; acceptSpan
	// is open until the acceptance decision. Nil for Recover's reruns.
	traceCtx   context.Context
	span       trace.Span
	acceptSpan trace.Span
}

// New builds a daemon over an open journal, the node state and an executor.
// Call Recover before Submit, so that a crash's leftovers are settled first.
func New(logger hclog.Logger, cfg Config, j *journal.Journal, state *State, exec Executor) (*Daemon, error) {
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	if cfg.NodeID == "" {
		return nil, errors.New("daemon: no node id")
	}
	if cfg.Role == "" {
		cfg.Role = "node"
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Clock == nil {
		cfg.Clock = &trust.Clock{Now: cfg.Now}
	}
	if cfg.CompactEvery <= 0 {
		cfg.CompactEvery = time.Hour
	}
	if cfg.Tracer == nil {
		cfg.Tracer = noop.NewTracerProvider().Tracer("")
	}
	if err := cfg.Lanes.Validate(); err != nil {
		return nil, fmt.Errorf("daemon: %w", err)
	}
	boot := cfg.BootID
	if boot == "" {
		b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
		if err != nil {
			return nil, fmt.Errorf("daemon: reading the boot id: %w", err)
		}
		boot = strings.TrimSpace(string(b))
	}
	ctx, cancel := context.WithCancel(context.Background())
	d := &Daemon{
		logger:      logger.Named("daemon").With("node_id", cfg.NodeID),
		cfg:         cfg,
		journal:     j,
		state:       state,
		exec:        exec,
		pool:        lanes.New(cfg.Lanes),
		bootID:      boot,
		subs:        subscribers{set: map[*watcher]struct{}{}, onState: cfg.OnState},
		baseCtx:     ctx,
		baseCancel:  cancel,
		active:      map[string]*entry{},
		compactDone: make(chan struct{}),
	}
	go d.compactLoop()
	return d, nil
}

// JournalID is the journal id bcd reports in Hello.
func (d *Daemon) JournalID() string { return d.journal.ID() }

// BootID is the boot id bcd reports in Hello and journals commands with.
func (d *Daemon) BootID() string { return d.bootID }

// State is the node state served to plugins.
func (d *Daemon) State() *State { return d.state }

// Lanes is the lane worker pool.
func (d *Daemon) Lanes() *lanes.Pool { return d.pool }

// Clock is the node's view of server time, in which not_after is judged.
func (d *Daemon) Clock() *trust.Clock { return d.cfg.Clock }

// SetServerTime keeps the offset between the server's clock
// (Welcome.server_time) and the node's, whatever its size: what a node
// without command-signing roots does. The session client bounds it once
// the trust bundle holds roots (trust.Clock.ObserveServerTime).
func (d *Daemon) SetServerTime(server time.Time) { d.cfg.Clock.ApplyServerTime(server) }

// serverNow is the time not_after is judged in.
func (d *Daemon) serverNow() time.Time { return d.cfg.Clock.ServerNow() }

// InFlight lists the commands bcd holds as not finished, for Hello.
func (d *Daemon) InFlight() []string {
	d.lock.Lock()
	defer d.lock.Unlock()
	out := make([]string, 0, len(d.active))
	for id := range d.active {
		out = append(out, id)
	}
	return out
}

func (d *Daemon) compactLoop() {
	defer close(d.compactDone)
	t := time.NewTicker(d.cfg.CompactEvery)
	defer t.Stop()
	for {
		select {
		case <-d.baseCtx.Done():
			return
		case <-t.C:
			if n, err := d.journal.Compact(d.cfg.Now()); err != nil {
				d.logger.Error("journal compaction failed", "error", err)
			} else if n > 0 {
				d.logger.Info("compacted the journal", "dropped", n)
			}
		}
	}
}

// Close stops taking commands, stops the running ones and waits for them.
// A command stopped this way stays unfinished in the journal (unless its
// plugin reported a real outcome first), so the next start's Recover runs
// it again if it is retry-safe and fails it with interrupted otherwise: a
// restart of bcd is not a cancel.
func (d *Daemon) Close() error {
	d.lock.Lock()
	already := d.closing
	d.closing = true
	d.lock.Unlock()
	if already {
		return nil
	}
	d.baseCancel()
	d.runs.Wait()
	d.pool.Close()
	<-d.compactDone
	return nil
}
