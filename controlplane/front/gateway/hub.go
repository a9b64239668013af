package gateway

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/better-compute/commands/controlplane/commands/queue"
	"github.com/better-compute/commands/controlplane/internal/dbhealth"
	"github.com/better-compute/commands/internal/backoff"
)

// hub fans one LISTEN connection out to the sessions it holds, by node id.
type hub struct {
	// lock guards sessions.
	lock     sync.Mutex
	sessions map[string]map[*waker]struct{}
}

// waker is one session's wake-up: ch has room for one pending signal, and
// spec says whether a new spec generation is among the reasons.
type waker struct {
	ch   chan struct{}
	spec atomic.Bool
	// certs says the node's certificates changed: the session checks its
	// own again and closes when it was superseded or revoked.
	certs atomic.Bool
	// trust says a newer trust bundle was published: the session sends it
	// in another Welcome (refreshTrust).
	trust atomic.Bool
	// read says the session should read its open commands: set by every
	// wake-up but the trust bundle's.
	read atomic.Bool
	// shed says the gateway ends this session to even out its load with
	// the other gateways (shed.go).
	shed atomic.Bool
	// ticks counts the session's timer firings (needsTick; tests).
	ticks atomic.Int64
	// idle says the session's last read left it nothing to do on a timer
	// (waitsForWake: no open command, or only commands in flight): it does
	// not poll, and only the gateway's sweep (sweepIdle) looks for work
	// whose wake-up was lost.
	idle atomic.Bool
}

func newHub() *hub { return &hub{sessions: map[string]map[*waker]struct{}{}} }

func (h *hub) register(nodeID string) *waker {
	w := &waker{ch: make(chan struct{}, 1)}
	h.lock.Lock()
	defer h.lock.Unlock()
	if h.sessions[nodeID] == nil {
		h.sessions[nodeID] = map[*waker]struct{}{}
	}
	h.sessions[nodeID][w] = struct{}{}
	return w
}

func (h *hub) unregister(nodeID string, ch *waker) {
	h.lock.Lock()
	defer h.lock.Unlock()
	delete(h.sessions[nodeID], ch)
	if len(h.sessions[nodeID]) == 0 {
		delete(h.sessions, nodeID)
	}
}

// nodes returns the node ids of the sessions held, and which of them have
// an idle session.
func (h *hub) nodes() (ids []string, idle map[string]bool) {
	h.lock.Lock()
	defer h.lock.Unlock()
	ids = make([]string, 0, len(h.sessions))
	idle = map[string]bool{}
	for id, s := range h.sessions {
		ids = append(ids, id)
		for w := range s {
			if w.idle.Load() {
				idle[id] = true
			}
		}
	}
	return ids, idle
}

func (h *hub) count() int {
	h.lock.Lock()
	defer h.lock.Unlock()
	n := 0
	for _, s := range h.sessions {
		n += len(s)
	}
	return n
}

// wake signals the sessions of nodeID without blocking: a pending signal
// already covers this one.
func (h *hub) wake(nodeID string, spec, certs bool) {
	h.lock.Lock()
	defer h.lock.Unlock()
	for w := range h.sessions[nodeID] {
		if spec {
			w.spec.Store(true)
		}
		if certs {
			w.certs.Store(true)
		}
		w.read.Store(true)
		select {
		case w.ch <- struct{}{}:
		default:
		}
	}
}

// wakeTrust signals every session to send the newest trust bundle, and
// nothing else.
func (h *hub) wakeTrust() {
	h.signalAll(func(w *waker) { w.trust.Store(true) })
}

func (h *hub) wakeAll() {
	h.signalAll(func(w *waker) {
		// Notifications may have been lost: a spec and a certificate
		// change among them.
		w.spec.Store(true)
		w.certs.Store(true)
		w.trust.Store(true)
		w.read.Store(true)
	})
}

// signalAll sets each session's reasons with mark and signals it without
// blocking: a pending signal already covers this one.
func (h *hub) signalAll(mark func(w *waker)) {
	h.lock.Lock()
	defer h.lock.Unlock()
	for _, s := range h.sessions {
		for w := range s {
			mark(w)
			select {
			case w.ch <- struct{}{}:
			default:
			}
		}
	}
}

// listen holds a LISTEN connection, reconnecting with a backoff. After a
// reconnect every session is woken, since notifications may have been lost.
// A listener lost with the database counts towards the outage, logged once.
func (h *hub) listen(ctx context.Context, pool *pgxpool.Pool, logger hclog.Logger, o *dbhealth.Outage) {
	backoff.Loop(ctx, 100*time.Millisecond, 5*time.Second, func(ctx context.Context) (bool, error) {
		return h.listenOnce(ctx, pool, o)
	}, func(err error, wait time.Duration) {
		if dbhealth.Transient(err) {
			o.Failed("listening for dispatch wake-ups", err)
			logger.Debug("dispatch listener lost; reconnecting", "error", err, "backoff", wait)
		} else {
			logger.Warn("dispatch listener lost; reconnecting", "error", err, "backoff", wait)
		}
	})
}

// listenOnce holds one LISTEN connection until it fails; listened says
// whether it got as far as listening.
func (h *hub) listenOnce(ctx context.Context, pool *pgxpool.Pool, o *dbhealth.Outage) (listened bool, err error) {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return false, fmt.Errorf("acquiring the listener's connection: %w", err)
	}
	defer conn.Release()
	if err := queue.ListenDispatch(ctx, conn.Conn()); err != nil {
		return false, err
	}
	o.OK()
	h.wakeAll()
	for {
		w, err := queue.WaitDispatch(ctx, conn.Conn())
		if err != nil {
			// The connection is in an unknown state; drop it from the pool.
			_ = conn.Conn().Close(context.Background())
			return true, err
		}
		h.wake(w.NodeID, w.Spec, w.Certs)
	}
}
