package api_test

import (
	"context"
	"crypto/tls"
	"net"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/better-compute/commands/controlplane/commands/queue"
	"github.com/better-compute/commands/controlplane/front/api"
	"github.com/better-compute/commands/controlplane/front/gateway"
	"github.com/better-compute/commands/controlplane/internal/errcode"
	"github.com/better-compute/commands/controlplane/testing/fakedaemon"
	"github.com/better-compute/commands/controlplane/trust/pki"
	"github.com/better-compute/commands/internal/testutil"
	"github.com/better-compute/commands/internal/trust"
	agentv1 "github.com/better-compute/commands/proto/bc/agent/v1"
	apiv1 "github.com/better-compute/commands/proto/bc/api/v1"
)

// listAll follows nodes.list's cursors to the end, limit nodes a page, and
// returns the ids in order with the number of pages.
func listAll(t *testing.T, nodes apiv1.NodesClient, token string, req *apiv1.ListNodesRequest) (ids []string, pages int) {
	t.Helper()
	for {
		resp, err := nodes.List(as(token), req)
		require.NoError(t, err)
		pages++
		require.LessOrEqual(t, len(resp.GetItems()), int(req.GetLimit()), "a page holds at most limit nodes")
		for _, n := range resp.GetItems() {
			ids = append(ids, n.GetId())
		}
		if resp.GetNextCursor() == "" {
			return ids, pages
		}
		require.NotEmpty(t, resp.GetItems(), "a page with a next cursor has nodes")
		req.Cursor = resp.GetNextCursor()
		require.Less(t, pages, 100, "nodes.list never reaches its last page")
	}
}

func (b *bundle) createNodes(t *testing.T, tenantID, pool string, ids ...string) {
	t.Helper()
	for _, id := range ids {
		_, err := b.queue.CreateNode(context.Background(), b.pool, queue.Node{ID: id, TenantID: tenantID, Pool: pool})
		require.NoError(t, err)
	}
}

// nodes.list pages through the tenant's live nodes by id: every node once,
// none of another tenant, none deleted; pool filters.
func TestNodesList_PagesTheTenantsNodesByID(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createNodes(t, tenantA, "gpu-east", "node_e1", "node_e2", "node_e3")
	b.createNodes(t, tenantA, "", "node_z9", "node_gone")
	_, err := apiv1.NewNodesClient(b.conn).Delete(as(tokOps), &apiv1.DeleteNodeRequest{TenantId: tenantA, NodeId: "node_gone"})
	require.NoError(t, err)
	nodes := apiv1.NewNodesClient(b.conn)

	want := []string{nodeA1, nodeA2, "node_e1", "node_e2", "node_e3", nodeGPU, "node_z9"}
	for _, limit := range []int32{1, 2, 3, 7, 200} {
		ids, pages := listAll(t, nodes, tokOps, &apiv1.ListNodesRequest{TenantId: tenantA, Limit: &limit})
		require.Equal(t, want, ids, "limit %d", limit)
		require.Equal(t, (len(want)+int(limit)-1)/int(limit), pages, "limit %d: the last full page says there is no next one", limit)
	}
	resp, err := nodes.List(as(tokOps), &apiv1.ListNodesRequest{TenantId: tenantA})
	require.NoError(t, err)
	require.Len(t, resp.GetItems(), len(want), "no limit is 100 a page")
	require.Empty(t, resp.GetNextCursor())
	require.Equal(t, tenantA, resp.GetItems()[0].GetTenantId())
	require.Equal(t, "default", resp.GetItems()[0].GetPool())

	limit := int32(2)
	ids, _ := listAll(t, nodes, tokOps, &apiv1.ListNodesRequest{TenantId: tenantA, Pool: "gpu-east", Limit: &limit})
	require.Equal(t, []string{"node_e1", "node_e2", "node_e3"}, ids)

	neg := int32(-1)
	_, err = nodes.List(as(tokOps), &apiv1.ListNodesRequest{TenantId: tenantA, Limit: &neg})
	in := requireCode(t, err, errcode.InvalidInput)
	require.Equal(t, "limit", in.Details["field"])
	_, err = nodes.List(as(tokOps), &apiv1.ListNodesRequest{TenantId: tenantA, Cursor: "not a cursor"})
	in = requireCode(t, err, errcode.InvalidInput)
	require.Equal(t, "cursor", in.Details["field"])
	require.Contains(t, in.Message, "nextCursor")
}

// A tenant the caller does not see is NOT_FOUND, as nodes.get answers for
// its nodes; a tenant's list never shows another tenant's node.
func TestNodesList_TenantIsolation(t *testing.T) {
	t.Parallel()
	b := setup(t)
	nodes := apiv1.NewNodesClient(b.conn)
	_, err := nodes.List(as(tokOther), &apiv1.ListNodesRequest{TenantId: tenantA})
	requireCode(t, err, errcode.NotFound)
	_, err = nodes.List(as(tokOps), &apiv1.ListNodesRequest{TenantId: tenantB})
	requireCode(t, err, errcode.NotFound)
	_, err = nodes.List(as(tokOps), &apiv1.ListNodesRequest{TenantId: "tenant_nobody"})
	requireCode(t, err, errcode.NotFound)
	_, err = nodes.List(as(tokOps), &apiv1.ListNodesRequest{})
	requireCode(t, err, errcode.InvalidInput)

	resp, err := nodes.List(as(tokOther), &apiv1.ListNodesRequest{TenantId: tenantB})
	require.NoError(t, err)
	require.Len(t, resp.GetItems(), 1)
	require.Equal(t, nodeB1, resp.GetItems()[0].GetId())
	resp, err = nodes.List(as(tokAdmin), &apiv1.ListNodesRequest{TenantId: tenantA})
	require.NoError(t, err)
	for _, n := range resp.GetItems() {
		require.Equal(t, tenantA, n.GetTenantId())
		require.NotEqual(t, nodeB1, n.GetId())
	}
}

// nodes.list lists only the nodes the caller holds compute:nodes:read on
// (the narrow identity: compute-node/node_gpu*), and its pages stay full
// and in order across the nodes it may not read.
func TestNodesList_OnlyTheNodesTheCallerMayRead(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createNodes(t, tenantA, "", "node_gpu2", "node_gpu0", "node_b", "node_gpu3", "node_h")
	nodes := apiv1.NewNodesClient(b.conn)
	want := []string{"node_gpu0", nodeGPU, "node_gpu2", "node_gpu3"}
	for _, limit := range []int32{1, 2, 4} {
		ids, pages := listAll(t, nodes, tokNarrow, &apiv1.ListNodesRequest{TenantId: tenantA, Limit: &limit})
		require.Equal(t, want, ids, "limit %d", limit)
		require.Equal(t, (len(want)+int(limit)-1)/int(limit), pages, "limit %d", limit)
	}
	all, _ := listAll(t, nodes, tokReader, &apiv1.ListNodesRequest{TenantId: tenantA, Limit: ptr(int32(100))})
	require.Len(t, all, 8, "the reader reads every node of the tenant")
}

// nodeGateway is a real gateway on loopback over mTLS, on the test's
// database, that fake daemons connect to.
type nodeGateway struct {
	ca   *pki.CA
	addr string
}

func startGateway(t *testing.T, b *bundle, name string) *nodeGateway {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	ca, err := pki.NewCA("test")
	require.NoError(t, err)
	certPEM, keyPEM, err := ca.IssueServer("127.0.0.1")
	require.NoError(t, err)
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	require.NoError(t, err)
	gw := gateway.New(b.pool, b.queue, hclog.NewNullLogger(), gateway.Options{Poll: 200 * time.Millisecond, NodeCA: ca.Pool(), Name: name})
	go gw.Run(ctx)
	srv := grpc.NewServer(grpc.Creds(credentials.NewTLS(&tls.Config{
		Certificates: []tls.Certificate{cert}, ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: ca.Pool(), MinVersion: tls.VersionTLS13,
	})))
	agentv1.RegisterSessionServer(srv, gw)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return &nodeGateway{ca: ca, addr: lis.Addr().String()}
}

// connect runs d's session until the returned stop ends it.
func (g *nodeGateway) connect(t *testing.T, d *fakedaemon.Daemon) (stop func()) {
	t.Helper()
	keyPEM, csr, err := trust.NewKeyAndCSR(d.NodeID)
	require.NoError(t, err)
	certPEM, err := g.ca.IssueNode(csr, trust.Identity{NodeID: d.NodeID, Role: d.Role})
	require.NoError(t, err)
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	require.NoError(t, err)
	conn, err := grpc.NewClient(g.addr, grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{
		Certificates: []tls.Certificate{cert}, RootCAs: g.ca.Pool(), MinVersion: tls.VersionTLS13,
	})))
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	before := d.Welcome() // the last session's, when d had one
	go func() {
		defer close(done)
		_ = d.Run(ctx, conn)
	}()
	testutil.WaitFor(t, 10*time.Second, "welcome", func() bool { w := d.Welcome(); return w != nil && w != before })
	stopped := false
	stop = func() {
		if !stopped {
			stopped = true
			cancel()
			<-done
			_ = conn.Close()
		}
	}
	t.Cleanup(stop)
	return stop
}

func listed(t *testing.T, nodes apiv1.NodesClient, nodeID string) *apiv1.Node {
	t.Helper()
	resp, err := nodes.List(as(tokReader), &apiv1.ListNodesRequest{TenantId: tenantA})
	require.NoError(t, err)
	for _, n := range resp.GetItems() {
		if n.GetId() == nodeID {
			return n
		}
	}
	t.Fatalf("node %s not listed", nodeID)
	return nil
}

// A node's session on nodes.list and nodes.get follows its gateway session:
// connected with the gateway, since when, its boot and agent version while
// the gateway holds it; disconnected, with when, once it ends; connected
// again, with the new boot, after a reconnect.
func TestNodesList_SessionFollowsConnectAndDisconnect(t *testing.T) {
	t.Parallel()
	b := setup(t)
	nodes := apiv1.NewNodesClient(b.conn)
	never := listed(t, nodes, nodeA1)
	require.False(t, never.GetConnected())
	require.Nil(t, never.GetConnectedSince(), "a node that never connected has no session")
	require.Nil(t, never.GetLastSeen())
	require.Zero(t, never.GetSessionEpoch())

	gw := startGateway(t, b, "gw-test-1")
	d := fakedaemon.New(nodeA1)
	stop := gw.connect(t, d)
	n := listed(t, nodes, nodeA1)
	require.True(t, n.GetConnected())
	require.Equal(t, "gw-test-1", n.GetGateway())
	require.Equal(t, d.BootID, n.GetBootId())
	require.Equal(t, "fake", n.GetAgentVersion(), "the fake daemon's Hello names version fake")
	require.Equal(t, "node", n.GetRole())
	require.Equal(t, int64(1), n.GetSessionEpoch())
	require.NotNil(t, n.GetConnectedSince())
	require.NotNil(t, n.GetLastSeen())
	require.Nil(t, n.GetDisconnectedAt())
	require.False(t, listed(t, nodes, nodeA2).GetConnected(), "only the node with a session is connected")
	got, err := nodes.Get(as(tokReader), &apiv1.GetNodeRequest{TenantId: tenantA, NodeId: nodeA1})
	require.NoError(t, err)
	require.True(t, got.GetConnected(), "nodes.get shows the same session")
	require.Equal(t, "gw-test-1", got.GetGateway())

	stop()
	testutil.WaitFor(t, 10*time.Second, "the node to show disconnected", func() bool { return !listed(t, nodes, nodeA1).GetConnected() })
	n = listed(t, nodes, nodeA1)
	require.NotNil(t, n.GetDisconnectedAt())
	require.False(t, n.GetDisconnectedAt().AsTime().Before(n.GetConnectedSince().AsTime()))
	require.Equal(t, n.GetDisconnectedAt().AsTime(), n.GetLastSeen().AsTime(), "last seen when the session ended")
	require.Equal(t, "gw-test-1", n.GetGateway(), "the gateway that last held it")

	d.Reboot()
	gw.connect(t, d)
	n = listed(t, nodes, nodeA1)
	require.True(t, n.GetConnected())
	require.Equal(t, int64(2), n.GetSessionEpoch())
	require.Equal(t, d.BootID, n.GetBootId())
	require.Equal(t, "boot-"+nodeA1+"-1-rebooted", n.GetBootId(), "the new boot")
	require.Nil(t, n.GetDisconnectedAt())

	// A gateway that died with the session open stops refreshing it: once
	// its last refresh is older than a minute the node is disconnected.
	_, err = b.pool.Exec(context.Background(), `UPDATE nodes SET session_seen_at = now() - interval '61 seconds' WHERE id = $1`, nodeA1)
	require.NoError(t, err)
	n = listed(t, nodes, nodeA1)
	require.False(t, n.GetConnected())
	require.Nil(t, n.GetDisconnectedAt(), "no gateway recorded its end")
}

// The cursor decodes what it encodes, and nothing else.
func TestNodeCursor(t *testing.T) {
	id, err := api.DecodeNodeCursor(api.EncodeNodeCursor(nodeA1))
	require.NoError(t, err)
	require.Equal(t, nodeA1, id)
	id, err = api.DecodeNodeCursor("")
	require.NoError(t, err)
	require.Empty(t, id)
	for _, bad := range []string{"%%%", "bm9kZTo", "c2VxOjE"} {
		_, err := api.DecodeNodeCursor(bad)
		require.Error(t, err, bad)
	}
}

func FuzzDecodeNodeCursor(f *testing.F) {
	f.Add(api.EncodeNodeCursor(nodeA1))
	f.Add("")
	f.Add("c2VxOjE")
	f.Fuzz(func(t *testing.T, c string) {
		id, err := api.DecodeNodeCursor(c)
		if err != nil || c == "" {
			return
		}
		again, err := api.DecodeNodeCursor(api.EncodeNodeCursor(id))
		require.NoError(t, err, "the cursor of a node id a cursor named decodes")
		require.Equal(t, id, again)
	})
}
