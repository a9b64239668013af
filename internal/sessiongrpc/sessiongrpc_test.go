package sessiongrpc_test

import (
	"bytes"
	"context"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/better-compute/commands/internal/sessiongrpc"
	agentv1 "github.com/better-compute/commands/proto/bc/agent/v1"
)

// counts are the writes made on one end's connections, and their bytes.
type counts struct{ writes, bytes atomic.Int64 }

// countingConn counts the writes made on a connection.
type countingConn struct {
	net.Conn
	n *counts
}

func (c countingConn) Write(b []byte) (int, error) {
	c.n.writes.Add(1)
	c.n.bytes.Add(int64(len(b)))
	return c.Conn.Write(b)
}

type countingListener struct {
	net.Listener
	n *counts
}

func (l countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return countingConn{c, l.n}, nil
}

// acker answers each report with its acknowledgement, as the gateway does.
type acker struct {
	agentv1.UnimplementedSessionServer
}

func (acker) Connect(stream grpc.BidiStreamingServer[agentv1.NodeMessage, agentv1.GatewayMessage]) error {
	for {
		m, err := stream.Recv()
		if err != nil {
			return nil
		}
		u := m.GetUpdate()
		if err := stream.Send(&agentv1.GatewayMessage{Msg: &agentv1.GatewayMessage_Ack{Ack: &agentv1.UpdateAck{
			CommandId: u.GetCommandId(), UpdateSeq: u.GetUpdateSeq()}}}); err != nil {
			return err
		}
	}
}

// perExchange is what one end wrote per exchange.
type perExchange struct{ writes, bytes float64 }

// exchanges runs rounds report/acknowledgement exchanges on one session,
// each after the last was answered (a quiet session's pattern), and returns
// what each end wrote per exchange.
func exchanges(t *testing.T, srvOpts []grpc.ServerOption, dialOpts []grpc.DialOption, rounds int) (server, client perExchange) {
	t.Helper()
	var sw, cw counts
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := grpc.NewServer(srvOpts...)
	agentv1.RegisterSessionServer(srv, acker{})
	go func() { _ = srv.Serve(countingListener{lis, &sw}) }()
	t.Cleanup(srv.Stop)
	dial := func(ctx context.Context, addr string) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
		if err != nil {
			return nil, err
		}
		return countingConn{c, &cw}, nil
	}
	conn, err := grpc.NewClient(lis.Addr().String(), append(dialOpts,
		grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithContextDialer(dial))...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	stream, err := agentv1.NewSessionClient(conn).Connect(ctx)
	require.NoError(t, err)
	exchange := func(seq int64) {
		require.NoError(t, stream.Send(&agentv1.NodeMessage{Msg: &agentv1.NodeMessage_Update{Update: &agentv1.CommandUpdate{
			CommandId: "c", UpdateSeq: seq, State: agentv1.CommandState_COMMAND_STATE_SUCCEEDED}}}))
		m, err := stream.Recv()
		require.NoError(t, err)
		require.Equal(t, seq, m.GetAck().GetUpdateSeq())
	}
	// The connection's setup (preface, settings, headers) is not counted.
	exchange(0)
	sw0, sb0, cw0, cb0 := sw.writes.Load(), sw.bytes.Load(), cw.writes.Load(), cw.bytes.Load()
	for i := 1; i <= rounds; i++ {
		exchange(int64(i))
	}
	r := float64(rounds)
	return perExchange{float64(sw.writes.Load()-sw0) / r, float64(sw.bytes.Load()-sb0) / r},
		perExchange{float64(cw.writes.Load()-cw0) / r, float64(cw.bytes.Load()-cb0) / r}
}

// With the session's options, a report and its acknowledgement cost one
// write at each end and nothing else. With gRPC's defaults an exchange also
// carries flow control's bandwidth PINGs and their answers: more bytes
// always, and more writes whenever a PING does not share a write with a
// message (how often depends on scheduling, so only bytes are compared).
func TestAQuietSessionsExchangeCostsOneWriteAnEnd(t *testing.T) {
	const rounds = 200
	server, client := exchanges(t, sessiongrpc.ServerOptions(), sessiongrpc.DialOptions(), rounds)
	t.Logf("static windows: server %.2f writes %.1f bytes, client %.2f writes %.1f bytes an exchange", server.writes, server.bytes, client.writes, client.bytes)
	require.Equal(t, 1.0, server.writes, "server writes an exchange")
	require.Equal(t, 1.0, client.writes, "client writes an exchange")

	// The same exchange on gRPC's defaults, to show what the test tells
	// apart.
	dserver, dclient := exchanges(t, nil, nil, rounds)
	t.Logf("dynamic windows: server %.2f writes %.1f bytes, client %.2f writes %.1f bytes an exchange", dserver.writes, dserver.bytes, dclient.writes, dclient.bytes)
	require.Greater(t, dserver.bytes, server.bytes, "server bytes an exchange: gRPC's defaults add PINGs")
	require.Greater(t, dclient.bytes, client.bytes, "client bytes an exchange: gRPC's defaults add PING answers")
}

// A message larger than the window (a result near gRPC's 4 MiB limit)
// still crosses a session, the receiver granting its size as it reads it.
func TestAReportLargerThanTheWindowStillFlows(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := grpc.NewServer(sessiongrpc.ServerOptions()...)
	agentv1.RegisterSessionServer(srv, acker{})
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), append(sessiongrpc.DialOptions(),
		grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	stream, err := agentv1.NewSessionClient(conn).Connect(ctx)
	require.NoError(t, err)
	result := bytes.Repeat([]byte("x"), 4*sessiongrpc.Window)
	for seq := int64(1); seq <= 3; seq++ {
		require.NoError(t, stream.Send(&agentv1.NodeMessage{Msg: &agentv1.NodeMessage_Update{Update: &agentv1.CommandUpdate{
			CommandId: "c", UpdateSeq: seq, State: agentv1.CommandState_COMMAND_STATE_SUCCEEDED, Result: result}}}))
		m, err := stream.Recv()
		require.NoError(t, err)
		require.Equal(t, seq, m.GetAck().GetUpdateSeq())
	}
}
