package hostile

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"

	"github.com/better-compute/commands/internal/testutil"
	agentv1 "github.com/better-compute/commands/proto/bc/agent/v1"
)

// gateway is a hostile gateway: it speaks the real session protocol over
// gRPC with mTLS, and sends whatever the test scripts. It acknowledges
// every update it receives, as the real gateway does once stored, so the
// node never resends one into a later subtest.
type gateway struct {
	agentv1.UnimplementedSessionServer
	addr string

	// lock guards welcome and conns.
	lock    sync.Mutex
	welcome func() *agentv1.Welcome
	conns   []*conn
}

// conn is one session as the gateway sees it.
type conn struct {
	hello *agentv1.Hello
	// peer is the node certificate the session was opened with.
	peer *x509.Certificate
	out  chan *agentv1.GatewayMessage
	end  chan struct{}
	once sync.Once

	// lock guards msgs.
	lock sync.Mutex
	msgs []*agentv1.NodeMessage
}

func newGateway(t *testing.T, tlsCfg *tls.Config) *gateway {
	t.Helper()
	g := &gateway{}
	srv := grpc.NewServer(grpc.Creds(credentials.NewTLS(tlsCfg)))
	agentv1.RegisterSessionServer(srv, g)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	g.addr = lis.Addr().String()
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return g
}

// setWelcome scripts the Welcome of the sessions to come.
func (g *gateway) setWelcome(f func() *agentv1.Welcome) {
	g.lock.Lock()
	g.welcome = f
	g.lock.Unlock()
}

// Connect serves one session: Hello, the scripted Welcome, then what the
// test sends, until the test ends the session.
func (g *gateway) Connect(stream grpc.BidiStreamingServer[agentv1.NodeMessage, agentv1.GatewayMessage]) error {
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	if first.GetHello() == nil {
		return errors.New("the session must open with Hello")
	}
	c := &conn{hello: first.GetHello(), out: make(chan *agentv1.GatewayMessage, 256), end: make(chan struct{})}
	if p, ok := peer.FromContext(stream.Context()); ok {
		if ti, ok := p.AuthInfo.(credentials.TLSInfo); ok && len(ti.State.PeerCertificates) > 0 {
			c.peer = ti.State.PeerCertificates[0]
		}
	}
	g.lock.Lock()
	w := g.welcome
	g.lock.Unlock()
	if err := stream.Send(&agentv1.GatewayMessage{Msg: &agentv1.GatewayMessage_Welcome{Welcome: w()}}); err != nil {
		return err
	}
	g.lock.Lock()
	g.conns = append(g.conns, c)
	g.lock.Unlock()
	go func() {
		for {
			m, err := stream.Recv()
			if err != nil {
				return
			}
			c.lock.Lock()
			c.msgs = append(c.msgs, m)
			c.lock.Unlock()
			if u := m.GetUpdate(); u != nil {
				c.send(&agentv1.GatewayMessage{Msg: &agentv1.GatewayMessage_Ack{Ack: &agentv1.UpdateAck{CommandId: u.GetCommandId(), UpdateSeq: u.GetUpdateSeq()}}})
			}
		}
	}()
	for {
		select {
		case m := <-c.out:
			if err := stream.Send(m); err != nil {
				return err
			}
		case <-c.end:
			return errors.New("the test ended the session")
		case <-stream.Context().Done():
			return nil
		}
	}
}

// session waits for the n-th session (1-based) to open.
func (g *gateway) session(t *testing.T, n int) *conn {
	t.Helper()
	var c *conn
	testutil.WaitFor(t, 60*time.Second, "session to open", func() bool {
		g.lock.Lock()
		defer g.lock.Unlock()
		if len(g.conns) >= n {
			c = g.conns[n-1]
			return true
		}
		return false
	})
	return c
}

// sessions is how many sessions opened so far.
func (g *gateway) sessions() int {
	g.lock.Lock()
	defer g.lock.Unlock()
	return len(g.conns)
}

func (c *conn) send(m *agentv1.GatewayMessage) {
	select {
	case c.out <- m:
	case <-c.end:
	}
}

func (c *conn) close() { c.once.Do(func() { close(c.end) }) }

func (c *conn) command(env *agentv1.CommandEnvelope) {
	c.send(&agentv1.GatewayMessage{Msg: &agentv1.GatewayMessage_Command{Command: env}})
}

func (c *conn) spec(sp *agentv1.Spec) {
	c.send(&agentv1.GatewayMessage{Msg: &agentv1.GatewayMessage_Spec{Spec: sp}})
}

// await waits for a message the node sent on this session that pred takes,
// searching from the session's first message, and returns it.
func (c *conn) await(t *testing.T, what string, pred func(*agentv1.NodeMessage) bool) *agentv1.NodeMessage {
	t.Helper()
	var found *agentv1.NodeMessage
	testutil.WaitFor(t, 60*time.Second, what, func() bool {
		c.lock.Lock()
		defer c.lock.Unlock()
		for _, m := range c.msgs {
			if pred(m) {
				found = m
				return true
			}
		}
		return false
	})
	return found
}

// all returns the messages pred takes, so far.
func (c *conn) all(pred func(*agentv1.NodeMessage) bool) []*agentv1.NodeMessage {
	c.lock.Lock()
	defer c.lock.Unlock()
	var out []*agentv1.NodeMessage
	for _, m := range c.msgs {
		if pred(m) {
			out = append(out, m)
		}
	}
	return out
}

// outcome waits for the n-th terminal update of command id (1-based).
func (c *conn) outcome(t *testing.T, id string, n int) *agentv1.CommandUpdate {
	t.Helper()
	var got *agentv1.CommandUpdate
	testutil.WaitFor(t, 60*time.Second, "the outcome of "+id, func() bool {
		us := c.all(func(m *agentv1.NodeMessage) bool {
			u := m.GetUpdate()
			return u != nil && u.GetCommandId() == id && terminal(u.GetState()) && u.GetProgressMessage() == ""
		})
		if len(us) >= n {
			got = us[n-1].GetUpdate()
			return true
		}
		return false
	})
	return got
}

// condition waits for a NodeStatus whose condition of type typ pred takes.
func (c *conn) condition(t *testing.T, typ string, pred func(*agentv1.NodeCondition) bool) *agentv1.NodeCondition {
	t.Helper()
	var got *agentv1.NodeCondition
	c.await(t, "a "+typ+" condition", func(m *agentv1.NodeMessage) bool {
		for _, cd := range m.GetStatus().GetConditions() {
			if cd.GetType() == typ && pred(cd) {
				got = cd
				return true
			}
		}
		return false
	})
	return got
}

func terminal(s agentv1.CommandState) bool {
	switch s {
	case agentv1.CommandState_COMMAND_STATE_SUCCEEDED, agentv1.CommandState_COMMAND_STATE_FAILED, agentv1.CommandState_COMMAND_STATE_REJECTED,
		agentv1.CommandState_COMMAND_STATE_EXPIRED, agentv1.CommandState_COMMAND_STATE_CANCELLED:
		return true
	}
	return false
}
