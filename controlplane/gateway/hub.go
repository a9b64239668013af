package gateway

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/jackc/pgx/v5/pgxpool"
)

// dispatchChannel carries a node id per notification (migration 0002).
const dispatchChannel = "bc_dispatch"

// specPrefix marks a notification about a new spec generation.
const specPrefix = "spec:"

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
func (h *hub) wake(nodeID string, spec bool) {
	h.lock.Lock()
	defer h.lock.Unlock()
	for w := range h.sessions[nodeID] {
		if spec {
			w.spec.Store(true)
		}
		select {
		case w.ch <- struct{}{}:
		default:
		}
	}
}

func (h *hub) wakeAll() {
	h.lock.Lock()
	defer h.lock.Unlock()
	for _, s := range h.sessions {
		for w := range s {
			w.spec.Store(true)
			select {
			case w.ch <- struct{}{}:
			default:
			}
		}
	}
}

// listen holds a LISTEN connection, reconnecting with a backoff. After a
// reconnect every session is woken, since notifications may have been lost.
func (h *hub) listen(ctx context.Context, pool *pgxpool.Pool, logger hclog.Logger) {
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		err := h.listenOnce(ctx, pool)
		if ctx.Err() != nil {
			return
		}
		logger.Warn("dispatch listener lost; reconnecting", "error", err, "backoff", backoff)
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		if backoff < 5*time.Second {
			backoff *= 2
		}
	}
}

func (h *hub) listenOnce(ctx context.Context, pool *pgxpool.Pool) error {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, "LISTEN "+dispatchChannel); err != nil {
		return err
	}
	h.wakeAll()
	for {
		n, err := conn.Conn().WaitForNotification(ctx)
		if err != nil {
			// The connection is in an unknown state; drop it from the pool.
			_ = conn.Conn().Close(context.Background())
			return err
		}
		if node, ok := strings.CutPrefix(n.Payload, specPrefix); ok {
			h.wake(node, true)
		} else {
			h.wake(n.Payload, false)
		}
	}
}
