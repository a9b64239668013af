package session_test

import (
	"bytes"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/better-compute/commands/bcd/session"
	agentv1 "github.com/better-compute/commands/proto/bc/agent/v1"
)

// logWatch is a log sink whose lines a test can wait for.
type logWatch struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	wrote chan struct{}
}

func newLogWatch() *logWatch { return &logWatch{wrote: make(chan struct{}, 1)} }

func (w *logWatch) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	select {
	case w.wrote <- struct{}{}:
	default:
	}
	return w.buf.Write(p)
}

func (w *logWatch) count(s string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return strings.Count(w.buf.String(), s)
}

// waitCount waits until s was logged more than n times.
func (w *logWatch) waitCount(t *testing.T, s string, n int, within time.Duration) {
	t.Helper()
	deadline := time.After(within)
	for w.count(s) <= n {
		select {
		case <-w.wrote:
		case <-deadline:
			w.mu.Lock()
			defer w.mu.Unlock()
			t.Fatalf("%q not logged after %s; log:\n%s", s, within, w.buf.String())
		}
	}
}

func (w *logWatch) logger(t *testing.T) hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{Name: t.Name(), Level: hclog.Debug, Output: w})
}

// "A node reconnects within a second of its gateway being ready again."
// The gateway goes away while the node's reconnect backoff is 8 s (so its
// wait is 4 to 8 s); the gateway listens again on the same address once
// the node has seen it refuse connections; the node's next Hello reaches
// it within a second of Listen, not after the rest of the backoff.
func TestSession_ReconnectsWithinASecondOfTheGatewayListeningAgain(t *testing.T) {
	logs := newLogWatch()
	r := newRig(t, 0, func(c *session.Config) {
		c.BackoffMin, c.BackoffMax, c.Logger = 8*time.Second, 16*time.Second, logs.logger(t)
	})
	r.session()
	r.stopGateway()
	logs.waitCount(t, "session ended; reconnecting", 0, 30*time.Second)
	logs.waitCount(t, "the gateway does not accept connections", 0, 30*time.Second)
	ready := r.startGateway()
	s := r.session()
	took := s.at.Sub(ready)
	t.Logf("Hello %s after the gateway listened again (backoff 8 s: the wait was 4-8 s)", took.Round(time.Millisecond))
	require.Less(t, took, time.Second, "the node reconnects within a second of its gateway listening again")
}

// A gateway that accepts TCP but fails the session keeps the backoff: one
// that never completes the handshake (as one whose certificate the node
// does not trust) and one that refuses the node (NOT_FOUND). Each session
// attempt comes at least half the backoff after the last, and bcd
// connects at most once more per wait to see whether it listens.
func TestSession_AGatewayThatAcceptsButRefusesKeepsTheBackoff(t *testing.T) {
	const backoff = time.Second
	t.Run("no handshake", func(t *testing.T) {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		t.Cleanup(func() { _ = lis.Close() })
		type conn struct {
			at      time.Time
			attempt bool // it sent bytes (the HTTP/2 preface): a session attempt, not a check
		}
		conns := make(chan conn, 64)
		go func() {
			for {
				c, err := lis.Accept()
				if err != nil {
					return
				}
				go func(c net.Conn) {
					at := time.Now()
					_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
					n, _ := c.Read(make([]byte, 1))
					_ = c.Close()
					conns <- conn{at: at, attempt: n > 0}
				}(c)
			}
		}()
		newRig(t, 0, func(c *session.Config) {
			c.Address, c.BackoffMin, c.BackoffMax = lis.Addr().String(), backoff, backoff
		})
		var attempts []time.Time
		checks := 0
		deadline := time.After(60 * time.Second)
		for len(attempts) < 4 {
			select {
			case c := <-conns:
				if c.attempt {
					attempts = append(attempts, c.at)
				} else {
					checks++
				}
			case <-deadline:
				t.Fatal("fewer than 4 session attempts in 60 s")
			}
		}
		requireSpaced(t, attempts, backoff)
		require.LessOrEqual(t, checks, len(attempts), "at most one check per wait")
	})
	t.Run("NOT_FOUND", func(t *testing.T) {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		counted := &countingListener{Listener: lis}
		calls := make(chan time.Time, 64)
		srv := grpc.NewServer()
		agentv1.RegisterSessionServer(srv, refuser{calls: calls})
		go func() { _ = srv.Serve(counted) }()
		t.Cleanup(srv.Stop)
		newRig(t, 0, func(c *session.Config) {
			c.Address, c.BackoffMin, c.BackoffMax = lis.Addr().String(), backoff, backoff
		})
		var attempts []time.Time
		deadline := time.After(60 * time.Second)
		for len(attempts) < 4 {
			select {
			case at := <-calls:
				attempts = append(attempts, at)
			case <-deadline:
				t.Fatal("fewer than 4 session attempts in 60 s")
			}
		}
		requireSpaced(t, attempts, backoff)
		require.LessOrEqual(t, int(counted.n.Load()), 2*len(attempts)+1, "one connection per attempt and at most one check per wait")
	})
}

// requireSpaced checks that session attempts came at least half the
// backoff apart (Jitter's lower bound).
func requireSpaced(t *testing.T, attempts []time.Time, backoff time.Duration) {
	t.Helper()
	for i := 1; i < len(attempts); i++ {
		gap := attempts[i].Sub(attempts[i-1])
		t.Logf("attempt %d after %s", i+1, gap.Round(time.Millisecond))
		require.GreaterOrEqual(t, gap, backoff/2, "a gateway that refuses is retried after the backoff's jitter, not sooner")
	}
}

// refuser refuses every session as the gateway refuses an unknown node.
type refuser struct {
	agentv1.UnimplementedSessionServer
	calls chan<- time.Time
}

func (r refuser) Connect(stream grpc.BidiStreamingServer[agentv1.NodeMessage, agentv1.GatewayMessage]) error {
	r.calls <- time.Now()
	return status.Error(codes.NotFound, "node node_s1 is not registered or was deleted")
}

// countingListener counts the connections it accepted.
type countingListener struct {
	net.Listener
	n atomic.Int64
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.n.Add(1)
	}
	return c, err
}
