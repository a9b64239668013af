package session_test

import (
	"bytes"
	"errors"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/bcd/session"
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

// A gateway that accepts TCP but never completes a session (as one with a
// certificate the node does not trust, or one that refuses the node) keeps
// the backoff: each session attempt waits at least half the backoff after
// the last, and bcd connects to it at most once more per wait to see
// whether it listens.
func TestSession_AGatewayThatAcceptsButRefusesKeepsTheBackoff(t *testing.T) {
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
	const backoff = time.Second
	r := newRig(t, 0, func(c *session.Config) {
		c.Address, c.BackoffMin, c.BackoffMax = lis.Addr().String(), backoff, backoff
	})
	_ = r
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
			t.Fatal(errors.New("fewer than 4 session attempts in 60 s"))
		}
	}
	for i := 1; i < len(attempts); i++ {
		gap := attempts[i].Sub(attempts[i-1])
		t.Logf("attempt %d after %s", i+1, gap.Round(time.Millisecond))
		require.GreaterOrEqual(t, gap, backoff/2, "a gateway that refuses is retried after the backoff's jitter, not sooner")
	}
	require.LessOrEqual(t, checks, len(attempts), "at most one check per wait")
}
