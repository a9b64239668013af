package gateway_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
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
	"github.com/better-compute/commands/controlplane/fleet/nodespecs"
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

func TestGateway_CommandRunsToSucceeded(t *testing.T) {
	e := setup(t, 1)
	d := fakedaemon.New(e.node.ID)
	d.Script = func(*agentv1.Command) fakedaemon.Action {
		return fakedaemon.Action{Kind: fakedaemon.Succeed, Result: json.RawMessage(`{"gpus":8}`)}
	}
	defer e.run(d, e.dial(trust.Identity{NodeID: e.node.ID}, 0))()
	c := e.enqueue("test.ctl", "k1")
	got := e.waitState(c.ID, queue.Succeeded)
	require.JSONEq(t, `{"gpus":8}`, string(got.Result))
	require.NotNil(t, got.SettledAt)
	require.Equal(t, 1, d.Runs(c.ID))
}

func TestGateway_NoSessionWithoutNodeCertificate(t *testing.T) {
	e := setup(t, 1)
	conn, err := grpc.NewClient(e.addrs[0], grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: e.ca.Pool(), MinVersion: tls.VersionTLS13})))
	require.NoError(t, err)
	defer conn.Close()
	err = fakedaemon.New(e.node.ID).Run(e.ctx, conn)
	require.Error(t, err, "a session without a client certificate must fail")

	// A certificate for another node cannot speak for this one.
	other := fakedaemon.New(e.node.ID)
	err = other.Run(e.ctx, e.dial(trust.Identity{NodeID: "node_someone_else"}, 0))
	require.ErrorContains(t, err, "certificate is for")
}

// "at most 8 control, 4 provision and 2 bulk commands outstanding per
// session; the rest stay pending" — asserted from the gateway's own accounting
// under a burst of 100 commands to one node.
func TestGateway_CreditsNeverExceededUnderBurst(t *testing.T) {
	e := setup(t, 1)
	d := fakedaemon.New(e.node.ID)
	d.Script = func(*agentv1.Command) fakedaemon.Action {
		return fakedaemon.Action{Kind: fakedaemon.Succeed, Delay: 5 * time.Millisecond}
	}
	defer e.run(d, e.dial(trust.Identity{NodeID: e.node.ID}, 0))()
	var ids []string
	for i := 0; i < 90; i++ {
		ids = append(ids, e.enqueue("test.ctl", "ctl-"+string(rune('a'+i/26))+string(rune('a'+i%26))).ID)
	}
	for i := 0; i < 10; i++ {
		ids = append(ids, e.enqueue("test.bulk", "bulk-"+string(rune('a'+i))).ID)
	}
	for _, id := range ids {
		e.waitState(id, queue.Succeeded)
		require.Equal(t, 1, d.Runs(id), "every command runs once")
	}
	max := e.gws[0].MaxOutstanding(e.node.ID)
	require.LessOrEqual(t, max[kind.LaneControl], 8)
	require.LessOrEqual(t, max[kind.LaneBulk], 2)
	require.Greater(t, max[kind.LaneControl], 1, "the burst should have used several control credits")
}

// "BUSY puts the command back to pending with a backoff".
func TestGateway_BusyGoesBackToPendingThenRuns(t *testing.T) {
	e := setup(t, 1)
	d := fakedaemon.New(e.node.ID)
	var mu sync.Mutex
	busy := 1
	d.Script = func(*agentv1.Command) fakedaemon.Action {
		mu.Lock()
		defer mu.Unlock()
		if busy > 0 {
			busy--
			return fakedaemon.Action{Kind: fakedaemon.Reject, Code: agentv1.RejectCode_REJECT_CODE_BUSY}
		}
		return fakedaemon.Action{Kind: fakedaemon.Succeed}
	}
	defer e.run(d, e.dial(trust.Identity{NodeID: e.node.ID}, 0))()
	c := e.enqueue("test.ctl", "busy")
	got := e.waitState(c.ID, queue.Succeeded)
	require.Equal(t, 2, got.Attempts, "dispatched twice: once refused BUSY, once run")
}

// "an in-flight command keeps its state and is marked cancel_requested_at; the
// gateway sends Cancel until the daemon reports a terminal state".
func TestGateway_CancelInFlight(t *testing.T) {
	e := setup(t, 1)
	d := fakedaemon.New(e.node.ID)
	d.Script = func(*agentv1.Command) fakedaemon.Action { return fakedaemon.Action{Kind: fakedaemon.Hang} }
	defer e.run(d, e.dial(trust.Identity{NodeID: e.node.ID}, 0))()
	c := e.enqueue("test.ctl", "hang")
	e.waitState(c.ID, queue.Running)
	require.NoError(t, pgx.BeginFunc(e.ctx, e.pool, func(tx pgx.Tx) error {
		got, err := e.q.Cancel(e.ctx, tx, e.node.ID, c.ID)
		require.Equal(t, queue.Running, got.State, "an in-flight command keeps its state")
		return err
	}))
	got := e.waitState(c.ID, queue.Cancelled)
	require.NotNil(t, got.CancelRequestedAt)
	require.Contains(t, d.Cancels(), c.ID)
}

// "Hello first settles what the reconnect proves": a new boot id completes an
// in-flight self-terminating command with rebooted: true; a new journal id
// fails in-flight commands that are not retry-safe with journal-lost; the
// retry-safe one is replayed.
func TestGateway_ReconnectSettlesBootAndJournal(t *testing.T) {
	e := setup(t, 1)
	d := fakedaemon.New(e.node.ID)
	d.Script = func(*agentv1.Command) fakedaemon.Action { return fakedaemon.Action{Kind: fakedaemon.Hang} }
	conn := e.dial(trust.Identity{NodeID: e.node.ID}, 0)
	stop := e.run(d, conn)
	reboot := e.enqueue("test.reboot", "reboot")
	e.waitState(reboot.ID, queue.Running)
	stop()

	d.Reboot()
	stop = e.run(d, conn)
	got := e.waitState(reboot.ID, queue.Succeeded)
	require.True(t, got.Rebooted)

	once := e.enqueue("test.once", "once")
	safe := e.enqueue("test.ctl", "safe")
	e.waitState(once.ID, queue.Running)
	e.waitState(safe.ID, queue.Running)
	stop()

	d.LoseJournal()
	d.Script = func(*agentv1.Command) fakedaemon.Action { return fakedaemon.Action{Kind: fakedaemon.Succeed} }
	defer e.run(d, conn)()
	lost := e.waitState(once.ID, queue.Failed)
	require.Equal(t, "journal-lost", lost.Reason)
	e.waitState(safe.ID, queue.Succeeded)
	require.Equal(t, 1, d.Runs(once.ID), "a command that is not retry-safe never runs twice")
}

// "Self-terminating kinds. A new boot or role on rejoin completes them as
// succeeded with rebooted: true": a node that comes back under another role
// (a discovery ramdisk booted into the installed system) with the same boot id.
func TestGateway_ReconnectWithNewRoleCompletesSelfTerminating(t *testing.T) {
	e := setup(t, 1)
	d := fakedaemon.New(e.node.ID)
	d.Script = func(*agentv1.Command) fakedaemon.Action { return fakedaemon.Action{Kind: fakedaemon.Hang} }
	conn := e.dial(trust.Identity{NodeID: e.node.ID}, 0)
	stop := e.run(d, conn)
	reboot := e.enqueue("test.reboot", "reboot")
	once := e.enqueue("test.once", "once")
	e.waitState(reboot.ID, queue.Running)
	e.waitState(once.ID, queue.Running)
	stop()

	// The node joined again, with a certificate for another role.
	d.Role = "discovery"
	defer e.run(d, e.dial(trust.Identity{NodeID: e.node.ID, Role: "discovery"}, 0))()
	got := e.waitState(reboot.ID, queue.Succeeded)
	require.True(t, got.Rebooted)
	require.Equal(t, queue.Running, e.get(once.ID).State, "a kind that is not self-terminating is replayed, not completed")
}

// "Session epochs fence stale sessions": with two gateways on one database, a
// node's newer session wins and the older one's reports change nothing.
func TestGateway_TwoGatewaysFenceStaleSession(t *testing.T) {
	e := setup(t, 2)
	old := fakedaemon.New(e.node.ID)
	hold := make(chan struct{})
	old.Script = func(*agentv1.Command) fakedaemon.Action {
		<-hold
		return fakedaemon.Action{Kind: fakedaemon.SkipToResult, Result: json.RawMessage(`{"from":"old"}`)}
	}
	stopOld := e.run(old, e.dial(trust.Identity{NodeID: e.node.ID}, 0))
	defer stopOld()
	c := e.enqueue("test.ctl", "fenced")
	testutil.WaitFor(t, 10*time.Second, "old session to receive the command", func() bool { return len(old.Received()) == 1 })

	fresh := fakedaemon.New(e.node.ID)
	fresh.JournalID = old.JournalID
	fresh.BootID = old.BootID
	fresh.Script = func(*agentv1.Command) fakedaemon.Action {
		return fakedaemon.Action{Kind: fakedaemon.SkipToResult, Result: json.RawMessage(`{"from":"new"}`)}
	}
	defer e.run(fresh, e.dial(trust.Identity{NodeID: e.node.ID}, 1))()
	// The new session replays the in-flight command and settles it; then the
	// stale session's late report must change nothing.
	got := e.waitState(c.ID, queue.Succeeded)
	require.JSONEq(t, `{"from":"new"}`, string(got.Result))
	close(hold)
	testutil.WaitFor(t, 10*time.Second, "the stale session's report to be processed", func() bool { return old.Acks(c.ID) >= 1 })
	require.JSONEq(t, `{"from":"new"}`, string(e.get(c.ID).Result))
}

// "The restricted identity is checked again at dispatch against the session's certificate."
func TestGateway_RestrictedIdentityCheckedAtDispatch(t *testing.T) {
	e := setup(t, 1)
	d := fakedaemon.New(e.node.ID)
	defer e.run(d, e.dial(trust.Identity{NodeID: e.node.ID, Role: "node", AllowedKinds: []string{"test.bulk"}}, 0))()
	c := e.enqueue("test.ctl", "restricted")
	got := e.waitState(c.ID, queue.Rejected)
	require.Equal(t, "UNSUPPORTED", got.Reason, "a reason is a bare code")
	require.Contains(t, got.Message, "restricted identity that does not accept test.ctl")
	require.Zero(t, d.Runs(c.ID))
}

// The spec is pushed on change and on SpecRequest.
func TestGateway_PushesNewSpecGeneration(t *testing.T) {
	e := setup(t, 1)
	d := fakedaemon.New(e.node.ID)
	conn := e.dial(trust.Identity{NodeID: e.node.ID}, 0)
	stop := e.run(d, conn)
	g, err := nodespecs.Set(e.ctx, e.pool, e.node.ID, json.RawMessage(`{"holds":[{"gpu":"GPU-1","state":"live"}]}`), nil)
	require.NoError(t, err)
	require.Equal(t, int64(1), g.Generation)
	testutil.WaitFor(t, 10*time.Second, "generation 1 to be pushed on change", func() bool {
		specs := d.Specs()
		return len(specs) == 1 && specs[0].GetGeneration() == 1
	})
	require.JSONEq(t, `{"holds":[{"gpu":"GPU-1","state":"live"}]}`, string(d.Specs()[0].GetSpec()))
	stop()

	// A node that has applied generation 1 asks for the spec: it gets
	// nothing older; once generation 2 exists, it gets that.
	_, err = nodespecs.Set(e.ctx, e.pool, e.node.ID, json.RawMessage(`{"holds":[]}`), nil)
	require.NoError(t, err)
	again := fakedaemon.New(e.node.ID)
	again.JournalID, again.BootID = d.JournalID, d.BootID
	again.AppliedGeneration = 1
	again.RequestSpec = true
	defer e.run(again, conn)()
	testutil.WaitFor(t, 10*time.Second, "generation 2 in answer to the SpecRequest", func() bool {
		for _, s := range again.Specs() {
			if s.GetGeneration() == 2 {
				return true
			}
		}
		return false
	})
	for _, s := range again.Specs() {
		require.Equal(t, int64(2), s.GetGeneration(), "never a generation the node already applied")
	}
}

// Conditions travel to the control plane: NodeStatus lands on the node row
// in the form the API shows ("True"/"False").
func TestGateway_StoresNodeStatus(t *testing.T) {
	e := setup(t, 1)
	d := fakedaemon.New(e.node.ID)
	d.Status = &agentv1.NodeStatus{
		Inventory:  []byte(`{"gpus":[{"index":0}]}`),
		Conditions: []*agentv1.NodeCondition{{Type: "RebootRequired", Status: true, Reason: "reboot-required-file"}},
	}
	defer e.run(d, e.dial(trust.Identity{NodeID: e.node.ID}, 0))()
	var conds, inv string
	testutil.WaitFor(t, 10*time.Second, "the node's status to be stored", func() bool {
		err := e.pool.QueryRow(e.ctx, `SELECT coalesce(conditions::text, ''), coalesce(inventory::text, '') FROM nodes WHERE id = $1`, e.node.ID).Scan(&conds, &inv)
		return err == nil && conds != ""
	})
	require.JSONEq(t, `[{"type":"RebootRequired","status":"True","reason":"reboot-required-file","message":""}]`, conds)
	require.JSONEq(t, `{"gpus":[{"index":0}]}`, inv)
}

// A node's session moves only its own commands: epochs count per node, so a
// second node whose session has the same epoch number must not settle the
// first node's command by naming its id. The gateway acknowledges the report
// and changes nothing.
func TestGateway_SessionCannotSettleAnotherNodesCommand(t *testing.T) {
	e := setup(t, 1)
	d := fakedaemon.New(e.node.ID)
	d.Script = func(*agentv1.Command) fakedaemon.Action { return fakedaemon.Action{Kind: fakedaemon.Hang} }
	defer e.run(d, e.dial(trust.Identity{NodeID: e.node.ID}, 0))()
	c := e.enqueue("test.ctl", "victim")
	e.waitState(c.ID, queue.Running)

	other, err := e.q.CreateNode(e.ctx, e.pool, queue.Node{TenantID: e.node.TenantID})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(e.ctx)
	defer cancel()
	stream, err := agentv1.NewSessionClient(e.dial(trust.Identity{NodeID: other.ID}, 0)).Connect(ctx)
	require.NoError(t, err)
	require.NoError(t, stream.Send(&agentv1.NodeMessage{Msg: &agentv1.NodeMessage_Hello{Hello: &agentv1.Hello{
		NodeId: other.ID, JournalId: "j", BootId: "b", Role: "node"}}}))
	first, err := stream.Recv()
	require.NoError(t, err)
	require.Equal(t, e.get(c.ID).DispatchedEpoch, first.GetWelcome().GetSessionEpoch(), "the epochs collide")

	require.NoError(t, stream.Send(&agentv1.NodeMessage{Msg: &agentv1.NodeMessage_Update{Update: &agentv1.CommandUpdate{
		CommandId: c.ID, UpdateSeq: 1, State: agentv1.CommandState_COMMAND_STATE_SUCCEEDED, Result: []byte(`{"forged":true}`)}}}))
	for {
		m, err := stream.Recv()
		require.NoError(t, err)
		if a := m.GetAck(); a != nil && a.GetCommandId() == c.ID {
			break
		}
	}
	got := e.get(c.ID)
	require.Equal(t, queue.Running, got.State)
	require.Nil(t, got.Result)
}

// The role is the certificate's: a Hello that claims another is refused.
func TestGateway_HelloCannotClaimAnotherRole(t *testing.T) {
	e := setup(t, 1)
	d := fakedaemon.New(e.node.ID)
	d.Role = "discovery"
	err := d.Run(e.ctx, e.dial(trust.Identity{NodeID: e.node.ID, Role: "node"}, 0))
	require.ErrorContains(t, err, "certificate is for role")
}

// "the manifests' role allowlists say so, and the control plane routes by
// them": a command queued while the node's recorded role allowed it is
// rejected at dispatch once the session's certificate is for a role the
// kind does not run on, and never reaches the node.
func TestGateway_RoutesByTheCertificatesRole(t *testing.T) {
	e := setup(t, 1)
	c := e.enqueue("test.ctl", "role")
	d := fakedaemon.New(e.node.ID)
	d.Role = "site"
	defer e.run(d, e.dial(trust.Identity{NodeID: e.node.ID, Role: "site"}, 0))()
	got := e.waitState(c.ID, queue.Rejected)
	require.Equal(t, "UNSUPPORTED", got.Reason)
	require.Contains(t, got.Message, "test.ctl runs only on role node; this node's certificate is for role site")
	require.Zero(t, d.Runs(c.ID))
	require.Empty(t, d.Received())
}

// An idle session does not poll; a command whose wake-up was lost (its
// NOTIFY never sent) still reaches it, within IdlePoll, through the
// gateway's sweep of its sessions (gateway.Options.IdlePoll). Poll is an
// hour here, so no session's own tick could bring it.
func TestGateway_ACommandWhoseWakeUpWasLostReachesAnIdleSession(t *testing.T) {
	e := setupWith(t, setupOptions{gateways: 1, poll: time.Hour, idlePoll: 100 * time.Millisecond})
	d := fakedaemon.New(e.node.ID)
	d.Script = func(*agentv1.Command) fakedaemon.Action { return fakedaemon.Action{Kind: fakedaemon.Succeed} }
	defer e.run(d, e.dial(trust.Identity{NodeID: e.node.ID}, 0))()
	// A first command, woken as usual, proves the session replayed.
	first := e.enqueue("test.ctl", "woken")
	e.waitState(first.ID, queue.Succeeded)
	// Its session's next read finds nothing open: from then on it waits.
	testutil.WaitFor(t, 10*time.Second, "the session to be idle", func() bool { return e.gws[0].IdleSessions() == 1 })
	// The second is queued with the node's triggers off: no NOTIFY.
	var lost queue.Command
	require.NoError(t, pgx.BeginFunc(e.ctx, e.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(e.ctx, `SET LOCAL session_replication_role = replica`); err != nil {
			return err
		}
		var err error
		lost, _, err = e.q.Enqueue(e.ctx, tx, queue.EnqueueParams{TenantID: e.node.TenantID, NodeID: e.node.ID, Kind: "test.ctl", IdempotencyKey: "not-woken"})
		return err
	}))
	e.waitState(lost.ID, queue.Succeeded)
	require.Equal(t, 1, d.Runs(lost.ID))
}

// A command in flight only waits for its node's report: a session whose
// commands are all in flight waits for a wake-up instead of polling (in a
// fan-out to 19,500 nodes their polls were most of the database's work),
// and what would give it work still reaches it: a cancel request wakes it,
// and the node gets Cancel. Poll and IdlePoll are an hour here, so only the
// wake-up can bring it.
func TestGateway_ASessionWithOnlyCommandsInFlightWaitsAndACancelWakesIt(t *testing.T) {
	e := setupWith(t, setupOptions{gateways: 1, poll: time.Hour, idlePoll: time.Hour})
	d := fakedaemon.New(e.node.ID)
	d.Script = func(*agentv1.Command) fakedaemon.Action { return fakedaemon.Action{Kind: fakedaemon.Hang} }
	defer e.run(d, e.dial(trust.Identity{NodeID: e.node.ID}, 0))()
	c := e.enqueue("test.ctl", "in-flight")
	e.waitState(c.ID, queue.Running)
	testutil.WaitFor(t, 10*time.Second, "the session, its command in flight, to wait for wake-ups", func() bool { return e.gws[0].IdleSessions() == 1 })
	require.NoError(t, pgx.BeginFunc(e.ctx, e.pool, func(tx pgx.Tx) error {
		_, err := e.q.Cancel(e.ctx, tx, e.node.ID, c.ID)
		return err
	}))
	e.waitState(c.ID, queue.Cancelled)
	require.Contains(t, d.Cancels(), c.ID)
}
