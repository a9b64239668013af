package gateway_test

// The gateway tests' harness: gateways on one database, nodes dialled with
// their certificates, commands queued and waited on.

import (
	"bytes"
	"context"
	"crypto/tls"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/better-compute/commands/internal/trust"

	"github.com/hashicorp/go-hclog"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/better-compute/commands/controlplane/commands/kinds"
	"github.com/better-compute/commands/controlplane/commands/queue"
	"github.com/better-compute/commands/controlplane/front/gateway"
	"github.com/better-compute/commands/controlplane/internal/groupcommit"
	"github.com/better-compute/commands/controlplane/internal/storetest"
	"github.com/better-compute/commands/controlplane/testing/fakedaemon"
	"github.com/better-compute/commands/controlplane/trust/pki"
	"github.com/better-compute/commands/internal/pgtest"
	"github.com/better-compute/commands/internal/testutil"
	agentv1 "github.com/better-compute/commands/proto/bc/agent/v1"
	"github.com/better-compute/commands/sdk/kind"
)

var (
	ctlKind = kind.Manifest{Kind: "test.ctl", Lane: kind.LaneControl, Timeout: kind.Duration(time.Minute),
		Roles: []string{"node"}, Flags: kind.Flags{RetrySafe: true}, APIRunnable: true, Version: "1.0.0"}
	onceKind = kind.Manifest{Kind: "test.once", Lane: kind.LaneControl, Timeout: kind.Duration(time.Minute),
		Roles: []string{"node"}, Version: "1.0.0"}
	bulkKind = kind.Manifest{Kind: "test.bulk", Lane: kind.LaneBulk, Timeout: kind.Duration(time.Minute),
		Roles: []string{"node"}, Flags: kind.Flags{RetrySafe: true}, Version: "1.0.0"}
	rebootKind = kind.Manifest{Kind: "test.reboot", Lane: kind.LaneControl, Timeout: kind.Duration(time.Minute),
		Roles: []string{"node"}, Flags: kind.Flags{SelfTerminating: true, Destructive: true}, Version: "1.0.0"}
)

// env is a control plane: a database, a queue, a CA and gateways on loopback.
type env struct {
	t     *testing.T
	ctx   context.Context
	pool  *pgxpool.Pool
	q     *queue.Queue
	ca    *pki.CA
	node  queue.Node
	addrs []string
	gws   []*gateway.Gateway
	// proxy, with setupOptions.proxy, stands between the gateways' pool and
	// PostgreSQL (the test's own pool goes direct); logs holds the gateways'
	// log lines with setupOptions.logs.
	proxy *pgtest.Proxy
	logs  *syncBuffer
}

// setupOptions change what setupWith builds.
type setupOptions struct {
	gateways int
	// proxy puts a pgtest.Proxy between the gateways and the database, so
	// the test can make it unreachable.
	proxy bool
	// logs keeps the gateways' log lines (at debug) in env.logs.
	logs bool
	// trust is where Welcome's trust bundle comes from.
	trust gateway.BundleSource
	// group tunes the gateways' shared commits.
	group groupcommit.Options
	// secrets answers the nodes' SecretRequests.
	secrets gateway.SecretExchanger
	// poll and idlePoll replace the gateways' 200 ms Poll and their
	// default IdlePoll.
	poll, idlePoll time.Duration
}

func setup(t *testing.T, gateways int) *env { return setupWith(t, setupOptions{gateways: gateways}) }

func setupWith(t *testing.T, o setupOptions) *env {
	t.Helper()
	t.Parallel()
	pool := storetest.DB(t)
	gwPool := pool
	var proxy *pgtest.Proxy
	if o.proxy {
		proxy = pgtest.NewProxy(t)
		var err error
		gwPool, err = pgxpool.NewWithConfig(context.Background(), proxy.Config(t, pool.Config().ConnConfig.Database))
		require.NoError(t, err)
		t.Cleanup(gwPool.Close)
	}
	// Registered after the pool, so it runs before the pool closes: the
	// gateways' listeners hold a connection until their context ends.
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	reg, err := kinds.NewRegistry(ctlKind, onceKind, bulkKind, rebootKind)
	require.NoError(t, err)
	q := queue.New(reg, hclog.NewNullLogger())
	ten, err := q.CreateTenant(ctx, pool, queue.Tenant{Name: "acme"})
	require.NoError(t, err)
	node, err := q.CreateNode(ctx, pool, queue.Node{TenantID: ten.ID})
	require.NoError(t, err)
	ca, err := pki.NewCA("test")
	require.NoError(t, err)
	e := &env{t: t, ctx: ctx, pool: pool, q: q, ca: ca, node: node, proxy: proxy, logs: &syncBuffer{}}
	logger := hclog.NewNullLogger()
	if o.logs {
		logger = hclog.New(&hclog.LoggerOptions{Output: e.logs, Level: hclog.Debug})
	}
	certPEM, keyPEM, err := ca.IssueServer("127.0.0.1")
	require.NoError(t, err)
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	require.NoError(t, err)
	if o.poll == 0 {
		o.poll = 200 * time.Millisecond
	}
	for i := 0; i < max(o.gateways, 1); i++ {
		gw := gateway.New(gwPool, q, logger, gateway.Options{Poll: o.poll, IdlePoll: o.idlePoll, CancelResend: 100 * time.Millisecond,
			BusyBackoffMin: 50 * time.Millisecond, BusyBackoffMax: 100 * time.Millisecond, TrustBundle: o.trust, NodeCA: ca.Pool(), Group: o.group, Secrets: o.secrets})
		go gw.Run(ctx)
		srv := grpc.NewServer(grpc.Creds(credentials.NewTLS(&tls.Config{
			Certificates: []tls.Certificate{cert}, ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: ca.Pool(), MinVersion: tls.VersionTLS13,
		})))
		agentv1.RegisterSessionServer(srv, gw)
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		go func() { _ = srv.Serve(lis) }()
		t.Cleanup(srv.Stop)
		e.addrs = append(e.addrs, lis.Addr().String())
		e.gws = append(e.gws, gw)
	}
	return e
}

// syncBuffer is a log sink that tests read while the gateway writes.
type syncBuffer struct {
	lock sync.Mutex
	b    bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.lock.Lock()
	defer b.lock.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.lock.Lock()
	defer b.lock.Unlock()
	return b.b.String()
}

// dial connects as a node with a certificate for id.
func (e *env) dial(id trust.Identity, gw int) *grpc.ClientConn {
	e.t.Helper()
	conn, _, _ := e.dialCert(id, gw)
	return conn
}

// dialCert is dial that also returns the certificate and key it used.
func (e *env) dialCert(id trust.Identity, gw int) (*grpc.ClientConn, []byte, []byte) {
	e.t.Helper()
	keyPEM, csr, err := trust.NewKeyAndCSR(id.NodeID)
	require.NoError(e.t, err)
	certPEM, err := e.ca.IssueNode(csr, id)
	require.NoError(e.t, err)
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	require.NoError(e.t, err)
	conn, err := grpc.NewClient(e.addrs[gw], grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{
		Certificates: []tls.Certificate{cert}, RootCAs: e.ca.Pool(), MinVersion: tls.VersionTLS13,
	})))
	require.NoError(e.t, err)
	e.t.Cleanup(func() { _ = conn.Close() })
	return conn, certPEM, keyPEM
}

// run starts a fake daemon session; the returned stop ends it like a crash.
func (e *env) run(d *fakedaemon.Daemon, conn *grpc.ClientConn) (stop func()) {
	ctx, cancel := context.WithCancel(e.ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = d.Run(ctx, conn)
	}()
	testutil.WaitFor(e.t, 10*time.Second, "welcome", func() bool { return d.Welcome() != nil })
	return func() { cancel(); <-done }
}

func (e *env) enqueue(k, key string) queue.Command {
	e.t.Helper()
	var cmd queue.Command
	require.NoError(e.t, pgx.BeginFunc(e.ctx, e.pool, func(tx pgx.Tx) error {
		var err error
		cmd, _, err = e.q.Enqueue(e.ctx, tx, queue.EnqueueParams{TenantID: e.node.TenantID, NodeID: e.node.ID, Kind: k, IdempotencyKey: key})
		return err
	}))
	return cmd
}

func (e *env) get(id string) queue.Command {
	e.t.Helper()
	c, err := e.q.Get(e.ctx, e.pool, e.node.ID, id)
	require.NoError(e.t, err)
	return c
}

func (e *env) waitState(id string, want queue.State) queue.Command {
	e.t.Helper()
	var c queue.Command
	testutil.WaitFor(e.t, 15*time.Second, "command "+id+" to be "+string(want), func() bool {
		c = e.get(id)
		return c.State == want
	})
	return c
}
