package session_test

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/better-compute/commands/bcd/conditions"
	"github.com/better-compute/commands/bcd/daemon"
	"github.com/better-compute/commands/bcd/journal"
	"github.com/better-compute/commands/bcd/pluginhost"
	"github.com/better-compute/commands/bcd/session"
	"github.com/better-compute/commands/internal/testutil"
	agentv1 "github.com/better-compute/commands/proto/bc/agent/v1"
)

const nodeID = "node_s1"

// gatewaySession is one session as the test gateway sees it: the Hello, what
// the node sends, and a way to send to the node or end the session.
type gatewaySession struct {
	hello *agentv1.Hello
	// at is when the gateway read the Hello.
	at   time.Time
	recv chan *agentv1.NodeMessage
	send chan *agentv1.GatewayMessage
	end  chan struct{}
	once sync.Once
}

func (s *gatewaySession) close() { s.once.Do(func() { close(s.end) }) }

// testGateway speaks the gateway's side of the protocol over real gRPC, as
// the test scripts it: it can withhold acks and cut sessions, which the
// real gateway (tested end to end in e2e/) never does on purpose.
type testGateway struct {
	agentv1.UnimplementedSessionServer
	offset   time.Duration
	epoch    int64
	lock     sync.Mutex
	sessions chan *gatewaySession
}

func (g *testGateway) Connect(stream grpc.BidiStreamingServer[agentv1.NodeMessage, agentv1.GatewayMessage]) error {
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	at := time.Now()
	g.lock.Lock()
	g.epoch++
	epoch := g.epoch
	g.lock.Unlock()
	s := &gatewaySession{hello: first.GetHello(), at: at, recv: make(chan *agentv1.NodeMessage, 256), send: make(chan *agentv1.GatewayMessage, 16), end: make(chan struct{})}
	if err := stream.Send(&agentv1.GatewayMessage{Msg: &agentv1.GatewayMessage_Welcome{Welcome: &agentv1.Welcome{
		ServerTime: timestamppb.New(time.Now().Add(g.offset)), SessionEpoch: epoch}}}); err != nil {
		return err
	}
	g.sessions <- s
	go func() {
		for {
			m, err := stream.Recv()
			if err != nil {
				return
			}
			select {
			case s.recv <- m:
			case <-s.end:
				return
			}
		}
	}()
	for {
		select {
		case m := <-s.send:
			if err := stream.Send(m); err != nil {
				return err
			}
		case <-s.end:
			return io.ErrUnexpectedEOF
		case <-stream.Context().Done():
			return nil
		}
	}
}

// rig is a daemon with the real bcdcore plugin, a session client and the
// test gateway.
type rig struct {
	t  testing.TB
	gw *testGateway
	// addr is the gateway's listening address; srv serves it until
	// stopGateway (reconnect_test.go).
	addr   string
	srvMu  sync.Mutex
	srv    *grpc.Server
	d      *daemon.Daemon
	client *session.Client
	cancel context.CancelFunc
	done   chan struct{}
	state  *daemon.State
	host   *pluginhost.Host
}

var (
	pluginOnce sync.Once
	pluginDir  string
)

func plugins(t testing.TB) string {
	pluginOnce.Do(func() {
		dir, err := os.MkdirTemp("", "bcd-session-plugins-")
		require.NoError(t, err)
		src := testutil.BuildBinary(t, "./internal/testplugins/bcdcore_plugin")
		b, err := os.ReadFile(src)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(dir, filepath.Base(src)), b, 0o755))
		pluginDir = dir
	})
	return pluginDir
}

func newRig(t *testing.T, offset time.Duration, adjust ...func(*session.Config)) *rig {
	return newRigTB(t, offset, adjust...)
}

func newRigB(b *testing.B) *rig { return newRigTB(b, 0) }

// newRigTB builds a rig; adjust changes the session client's config. The
// rig resends unacknowledged updates within a session only after a minute,
// so that a test that withholds acks sees each update once per session
// unless it asks for resends.
func newRigTB(t testing.TB, offset time.Duration, adjust ...func(*session.Config)) *rig {
	t.Helper()
	gw := &testGateway{offset: offset, sessions: make(chan *gatewaySession, 8)}
	srv := grpc.NewServer()
	agentv1.RegisterSessionServer(srv, gw)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go func() { _ = srv.Serve(lis) }()

	lg := hclog.NewNullLogger()
	if testing.Verbose() {
		lg = hclog.New(&hclog.LoggerOptions{Name: t.Name(), Level: hclog.Debug})
	}
	dir := t.TempDir()
	j, err := journal.Open(lg, dir, journal.Options{})
	require.NoError(t, err)
	st, err := daemon.NewState(dir, j)
	require.NoError(t, err)
	host := pluginhost.New(lg, pluginhost.Config{Dir: plugins(t)}, st)
	require.NoError(t, host.Start(context.Background()))
	r := &rig{t: t, gw: gw, addr: lis.Addr().String(), srv: srv, state: st, host: host, done: make(chan struct{})}
	t.Cleanup(r.stopGateway)
	var client *session.Client
	var clientLock sync.Mutex
	d, err := daemon.New(lg, daemon.Config{NodeID: nodeID, Role: "node", BootID: "boot-1", OnSpecRequest: func(have int64) {
		clientLock.Lock()
		c := client
		clientLock.Unlock()
		c.RequestSpec(have)
	}}, j, st, host)
	require.NoError(t, err)
	cfg := session.Config{
		Address: lis.Addr().String(), DialOptions: []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())},
		NodeID: nodeID, Role: "node", Version: "test", Kinds: host.Manifests,
		Conditions: conditions.New(conditions.Config{RebootRequiredFile: filepath.Join(dir, "no-reboot-required")}),
		BackoffMin: 10 * time.Millisecond, BackoffMax: 50 * time.Millisecond, Logger: lg,
		ResendMin: time.Minute, ResendMax: time.Minute,
	}
	for _, a := range adjust {
		a(&cfg)
	}
	clientLock.Lock()
	client = session.New(cfg, d)
	clientLock.Unlock()
	r.d, r.client = d, client
	_, err = d.Recover(context.Background())
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	go func() {
		defer close(r.done)
		_ = client.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-r.done
		require.NoError(t, d.Close())
		require.NoError(t, host.Close())
		require.NoError(t, j.Close())
	})
	return r
}

func (r *rig) session() *gatewaySession {
	r.t.Helper()
	select {
	case s := <-r.gw.sessions:
		return s
	case <-time.After(30 * time.Second):
		r.t.Fatal("no session")
		return nil
	}
}

// envelope is a command as the gateway sends it: its exact bytes.
func envelope(t testing.TB, c *agentv1.Command) *agentv1.GatewayMessage {
	b, err := proto.Marshal(c)
	require.NoError(t, err)
	return &agentv1.GatewayMessage{Msg: &agentv1.GatewayMessage_Command{Command: &agentv1.CommandEnvelope{Command: b, SessionEpoch: 1}}}
}

func holdCommand(t testing.TB, id, kind string, release bool) (*agentv1.Command, string, string) {
	d := t.TempDir()
	count, rel := filepath.Join(d, "count"), filepath.Join(d, "release")
	if release {
		require.NoError(t, os.WriteFile(rel, nil, 0o600))
	}
	p, err := json.Marshal(map[string]string{"countFile": count, "releaseFile": rel})
	require.NoError(t, err)
	return &agentv1.Command{Id: id, NodeId: nodeID, Seq: 1, Kind: kind, Payload: p, NotAfter: timestamppb.New(time.Now().Add(10 * time.Minute))}, count, rel
}

// updatesUntil collects s's CommandUpdates for id until one in state want.
func updatesUntil(t *testing.T, s *gatewaySession, id string, want agentv1.CommandState) []*agentv1.CommandUpdate {
	t.Helper()
	var out []*agentv1.CommandUpdate
	deadline := time.After(30 * time.Second)
	for {
		select {
		case m := <-s.recv:
			u := m.GetUpdate()
			if u == nil || u.GetCommandId() != id {
				continue
			}
			out = append(out, u)
			if u.GetState() == want && u.GetProgressMessage() == "" {
				return out
			}
		case <-deadline:
			t.Fatalf("no %s update for %s; got %v", want, id, out)
		}
	}
}

func runs(t *testing.T, countFile string) int {
	b, err := os.ReadFile(countFile)
	require.NoError(t, err)
	return strings.Count(string(b), "\n")
}

// stopGateway stops the test gateway: its listener closes and every
// session breaks, as when bc-server dies.
func (r *rig) stopGateway() {
	r.srvMu.Lock()
	defer r.srvMu.Unlock()
	if r.srv != nil {
		r.srv.Stop()
		r.srv = nil
	}
}

// startGateway serves the test gateway again on its old address and
// returns when the listener was ready (Listen succeeded).
func (r *rig) startGateway() time.Time {
	r.t.Helper()
	r.srvMu.Lock()
	defer r.srvMu.Unlock()
	lis, err := net.Listen("tcp", r.addr)
	require.NoError(r.t, err)
	ready := time.Now()
	srv := grpc.NewServer()
	agentv1.RegisterSessionServer(srv, r.gw)
	go func() { _ = srv.Serve(lis) }()
	r.srv = srv
	return ready
}
