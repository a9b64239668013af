package e2e

import (
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// tcpBalancer is the layer-4 load balancer the operator guide asks for in
// front of several gateways ("Several gateways behind a load balancer"):
// TLS passes through untouched (the gateway must see the node's
// certificate), each new connection goes to the next gateway in turn, and a
// gateway that refuses the connection is skipped, as a health check would
// take it out. When either side of a connection closes, both do: a gateway
// killed with -9 resets its connections and the node sees its session end.
type tcpBalancer struct {
	lis      net.Listener
	backends []string
	next     atomic.Uint64
	wg       sync.WaitGroup
	mu       sync.Mutex
	conns    map[net.Conn]struct{}
}

// startBalancer listens on a loopback port until the test ends.
func startBalancer(t *testing.T, backends ...string) *tcpBalancer {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	b := &tcpBalancer{lis: lis, backends: backends, conns: map[net.Conn]struct{}{}}
	b.wg.Go(b.serve)
	t.Cleanup(func() {
		_ = lis.Close()
		b.mu.Lock()
		for c := range b.conns {
			_ = c.Close()
		}
		b.conns = nil // a pipe still dialling closes its ends (track)
		b.mu.Unlock()
		b.wg.Wait()
	})
	return b
}

func (b *tcpBalancer) addr() string { return b.lis.Addr().String() }

func (b *tcpBalancer) serve() {
	for {
		c, err := b.lis.Accept()
		if err != nil {
			return
		}
		b.wg.Go(func() { b.pipe(c) })
	}
}

// pipe connects c to the next gateway that accepts, and copies both ways
// until either side ends.
func (b *tcpBalancer) pipe(c net.Conn) {
	var up net.Conn
	for range b.backends {
		addr := b.backends[(b.next.Add(1)-1)%uint64(len(b.backends))]
		d, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			up = d
			break
		}
	}
	if up == nil || !b.track(c, up) {
		_ = c.Close()
		if up != nil {
			_ = up.Close()
		}
		return
	}
	done := make(chan struct{}, 2)
	cp := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		done <- struct{}{}
	}
	go cp(up, c)
	go cp(c, up)
	<-done
	_ = c.Close()
	_ = up.Close()
	<-done
	b.mu.Lock()
	if b.conns != nil {
		delete(b.conns, c)
		delete(b.conns, up)
	}
	b.mu.Unlock()
}

// track records both ends so that the test's end closes them; false when
// the balancer already stopped.
func (b *tcpBalancer) track(c, up net.Conn) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.conns == nil {
		return false
	}
	b.conns[c], b.conns[up] = struct{}{}, struct{}{}
	return true
}
