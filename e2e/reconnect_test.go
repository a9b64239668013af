package e2e

import (
	"net"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/internal/testutil"
)

// "A node reconnects within a second of its gateway (or another) being
// ready again. ... A test measures the reconnect after a 40 s outage."
// The real bcd holds a session with the bc-server binary; bc-server is
// killed (-9) and stays down for 40 s, long enough for bcd's backoff to
// reach its 30 s ceiling; then it starts again on the same addresses. bcd's
// session is open again within a second of the gateway's listener
// accepting connections. Skipped under -short (it lasts the outage).
func TestE2E_BcdReconnectsWithinASecondAfterA40sGatewayOutage(t *testing.T) {
	if testing.Short() {
		t.Skip("a 40 s outage")
	}
	const outage = 40 * time.Second
	c := newCluster(t)
	srv := c.swapToBinary()
	n := c.join()
	n.start()
	before := n.sessions()
	waits := func() int { return strings.Count(n.logs.String(), "session ended; reconnecting") }
	srv.kill()
	down := time.Now()
	testutil.WaitFor(t, 30*time.Second, "bcd to see its session end", func() bool { return waits() > 0 })
	// The outage itself (not a synchronisation): bcd keeps trying, its
	// backoff growing, while nothing listens.
	select {
	case <-time.After(time.Until(down.Add(outage))):
	case <-n.done:
		t.Fatalf("bcd exited during the outage:\n%s", n.logs.String())
	}
	attempts := waits()

	// Record when the gateway's listener first accepts a connection and
	// when bcd's session is open again, each polled every 5 ms while
	// bc-server starts.
	listening, open := make(chan time.Time, 1), make(chan time.Time, 1)
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		for {
			if conn, err := net.DialTimeout("tcp", c.srv.Gateway, time.Second); err == nil {
				listening <- time.Now()
				_ = conn.Close()
				return
			}
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	}()
	go func() {
		for n.sessions() == before {
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
		open <- time.Now()
	}()
	srv.start(c)
	served := time.Now()
	var listened, opened time.Time
	select {
	case listened = <-listening:
	case <-time.After(30 * time.Second):
		t.Fatal("the gateway's listener never accepted a connection")
	}
	select {
	case opened = <-open:
	case <-time.After(60 * time.Second):
		t.Fatalf("bcd's session did not come back:\n%s", n.logs.String())
	}
	took := opened.Sub(listened)
	t.Logf("outage %s (bcd began %d backoff waits); session open %s after the gateway listened (bc-server's API answered %s after it listened)",
		outage, attempts, took.Round(time.Millisecond), served.Sub(listened).Round(time.Millisecond))
	require.Less(t, took, time.Second, "bcd reconnects within a second of its gateway being ready again")
}
