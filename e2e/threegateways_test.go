package e2e

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/better-compute/commands/controlplane/commands/kinds"
	"github.com/better-compute/commands/controlplane/commands/queue"
	"github.com/better-compute/commands/controlplane/server"
	"github.com/better-compute/commands/controlplane/server/servertest"
	"github.com/better-compute/commands/controlplane/testing/sim"
	"github.com/better-compute/commands/controlplane/trust/pki"
	"github.com/better-compute/commands/internal/testutil"
	apiv1 "github.com/better-compute/commands/proto/bc/api/v1"
)

// simNodesThreeGateways is the simulated fleet of the three-gateway test.
const simNodesThreeGateways = 1000

// Issue 34: "A test with three gateways and thousands of simulated nodes
// plus a few real bcds under load: kill -9 one gateway; every node re-homes
// to the others; commands in flight settle exactly once (the journal's
// answer); nothing is dispatched twice; no node's commands stall; the
// failed-over sessions are back within a bound you measure and document.
// Then start it again: new sessions spread across the three."
//
// Three bc-server processes on one database and node CA (gw-a, gw-b,
// gw-c); three real bcds behind a layer-4 balancer (tcpBalancer), one on
// each gateway, each running a command that is not retry-safe; a thousand
// simulated nodes spread over the three, under a steady load of commands.
// gw-a dies by kill -9. Every session is back on gw-b and gw-c; the held
// commands finish on their nodes and settle once, each run once; the
// steady load lost nothing, and every one of its commands settled exactly
// once. gw-a starts again, empty: the loaded gateways shed sessions until
// none holds more than 1.1 times the mean, and a fan-out then reaches every
// simulated node.
func TestE2E_ThreeGatewaysOneKilledItsNodesRehomeAndComeBack(t *testing.T) {
	c := newCluster(t, func(cfg *server.Config) {
		cfg.Gateway.Name = "gw-a"
		cfg.Gateway.Shed.Every = server.Duration(time.Second)
	})
	a := c.swapToBinary()
	b, bAPI := c.replicaBinary("gw-b")
	cc, _ := c.replicaBinary("gw-c")
	gws := []string{c.cfg.Gateway.Listen, b.gateway, cc.gateway}
	lb := startBalancer(t, gws...)
	// The test speaks to gw-b's API throughout: gw-a's dies.
	api := apiv1.NewCommandsClient(bAPI)

	// Three real bcds, joined and then connected through the balancer.
	ids := []string{servertest.NodeA1, "node_a2", "node_a3"}
	var nodes []*node
	for _, id := range ids {
		if id != servertest.NodeA1 {
			_, err := c.srv.Queue.CreateNode(context.Background(), c.srv.Pool, queue.Node{ID: id, TenantID: servertest.TenantA})
			require.NoError(t, err)
		}
		n := c.joinAs(id)
		n.controlPlane = lb.addr()
		n.start()
		nodes = append(nodes, n)
	}
	// Three connections pass the balancer, one after another, none
	// refused: round robin puts one bcd on each gateway.
	require.Equal(t, map[string]int{"gw-a": 1, "gw-b": 1, "gw-c": 1}, c.sessionsPerGateway(servertest.TenantA), "the balancer spreads the bcds")

	// The simulated fleet, spread over the three gateways.
	reg, err := kinds.NewRegistry(sim.Kind)
	require.NoError(t, err)
	q := queue.New(reg, hclog.NewNullLogger())
	ctx := context.Background()
	simTenant, simIDs, err := sim.Provision(ctx, c.srv.Pool, q, simNodesThreeGateways)
	require.NoError(t, err)
	ca, err := pki.LoadOrCreateCA(c.cfg.Gateway.CADir)
	require.NoError(t, err)
	certs, err := sim.IssueCerts(ca, simIDs)
	require.NoError(t, err)
	f, err := sim.StartFleet(ctx, sim.FleetConfig{Addrs: gws, Rehome: true, RootCAs: ca.Pool(), NodeIDs: simIDs, Certs: certs})
	require.NoError(t, err)
	t.Cleanup(f.Close)
	target := sim.Target{Pool: c.srv.Pool, Queue: q, TenantID: simTenant, Fleet: f}

	// Load: a command that is not retry-safe running on each bcd, and a
	// steady stream of commands to random simulated nodes.
	holds := make([]hold, len(ids))
	cmds := make([]*apiv1.Command, len(ids))
	for i, id := range ids {
		holds[i] = newHold(t)
		p, err := structpb.NewStruct(holds[i].payload())
		require.NoError(t, err)
		cmds[i], err = api.Run(c.ctx(), &apiv1.RunCommandRequest{TenantId: servertest.TenantA, NodeId: id, Kind: kindHoldOnce, Payload: p})
		require.NoError(t, err)
	}
	for _, h := range holds {
		h.waitStarted(t)
	}
	steadyCtx, stopSteady := context.WithCancel(ctx)
	defer stopSteady()
	steady := make(chan sim.SteadyResult, 1)
	steadyErr := make(chan error, 1)
	go func() {
		r, err := sim.Steady(steadyCtx, target, sim.SteadyOptions{Duration: 10 * time.Minute, Concurrency: 4, ReceiptTimeout: time.Minute})
		steady <- r
		steadyErr <- err
	}()
	testutil.WaitFor(t, 30*time.Second, "the steady load to reach nodes", func() bool {
		return c.commandsOf(simTenant, "succeeded") >= 20
	})

	// kill -9 gw-a.
	a.kill()
	died := time.Now()
	total := simNodesThreeGateways
	testutil.WaitFor(t, 2*time.Minute, "every session on gw-b and gw-c", func() bool {
		s, r := c.sessionsPerGateway(simTenant), c.sessionsPerGateway(servertest.TenantA)
		return s["gw-a"]+r["gw-a"] == 0 && s["gw-b"]+s["gw-c"] == total && r["gw-b"]+r["gw-c"] == len(ids)
	})
	back := time.Since(died)

	// The commands in flight on the bcds finish and settle once, each run
	// once: the node's journal answered the replay on its new session.
	for i, h := range holds {
		h.releaseNow(t)
		testutil.WaitFor(t, time.Minute, "the held command of "+ids[i]+" to succeed", func() bool {
			got, err := api.Get(c.ctx(), &apiv1.GetCommandRequest{TenantId: servertest.TenantA, NodeId: ids[i], CommandId: cmds[i].GetId()})
			return err == nil && got.GetState() == "succeeded"
		})
		require.Equal(t, 1, h.runs(t), "%s ran its command once", ids[i])
		require.Equal(t, 1, c.settledCount(cmds[i].GetId()), "one terminal state for %s's command", ids[i])
	}

	// The steady load: nothing lost, nothing settled twice.
	stopSteady()
	r := <-steady
	require.NoError(t, <-steadyErr, "the steady load ran until stopped")
	require.Zero(t, r.Lost, "every command of the steady load reached its node")
	testutil.WaitFor(t, time.Minute, "every command of the steady load to settle", func() bool {
		return c.openCommandsOf(simTenant) == 0
	})
	var settled, twice, commands int
	require.NoError(t, c.srv.Pool.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE n = 1), count(*) FILTER (WHERE n > 1) FROM (
		SELECT c.id, (SELECT count(*) FROM outbox o WHERE o.topic = 'command.settled' AND o.payload->>'commandId' = c.id) AS n
		FROM commands c WHERE c.tenant_id = $1) s`, simTenant).Scan(&commands, &settled, &twice))
	require.Zero(t, twice, "no command settled twice")
	require.Equal(t, commands, settled, "every command settled once")
	require.Equal(t, commands, c.commandsOf(simTenant, "succeeded"), "every command of the steady load succeeded")

	// gw-a again, on the same address, empty: the others shed until the
	// load is even.
	a.start(c)
	restarted := time.Now()
	var spread map[string]int
	testutil.WaitFor(t, 2*time.Minute, "no gateway above 1.1 times the mean", func() bool {
		spread = c.sessionsPerGateway("")
		n := []int{spread["gw-a"], spread["gw-b"], spread["gw-c"]}
		return n[0]+n[1]+n[2] == total+len(ids) && slices.Max(n) <= (total+len(ids))*11/30+1
	})
	even := time.Since(restarted)
	again, err := sim.Fanout(ctx, target, 2*time.Minute)
	require.NoError(t, err)
	require.Equal(t, total, again.Succeeded, "a fan-out after reaches every simulated node")
	t.Logf("three gateways, %d simulated nodes and %d bcds under load: after gw-a's kill -9 every session was back on gw-b and gw-c within %s; %d steady commands, none lost, each settled once; gw-a back: %v within %s",
		total, len(ids), back.Round(time.Millisecond), commands, spread, even.Round(time.Millisecond))
	for _, n := range nodes {
		n.stop()
	}
}

// replicaBinary runs another bc-server process on the cluster's database,
// node CA and identities, with its own API and gateway ports and gateway
// name: a replica behind the load balancer. It returns the process and a
// client connection to its API.
func (c *cluster) replicaBinary(name string) (*bcServer, *grpc.ClientConn) {
	c.t.Helper()
	cfg := c.cfg
	cfg.GRPCListen, cfg.HTTPListen = freeAddr(c.t), "127.0.0.1:0"
	cfg.Gateway.Listen, cfg.Gateway.Name = freeAddr(c.t), name
	b := &bcServer{t: c.t, bin: testutil.BuildBinary(c.t, "./controlplane/cmd/bc-server"), conf: filepath.Join(c.t.TempDir(), "server.yaml"), logs: &lockedBuffer{}, gateway: cfg.Gateway.Listen}
	y, err := yaml.Marshal(cfg)
	require.NoError(c.t, err)
	require.NoError(c.t, os.WriteFile(b.conf, y, 0o600))
	conn, err := grpc.NewClient(cfg.GRPCListen, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(c.t, err)
	b.runs = apiv1.NewFleetRunsClient(conn)
	c.t.Cleanup(func() {
		b.kill()
		_ = conn.Close()
		if c.t.Failed() {
			c.t.Logf("bc-server %s log:\n%s", name, b.logs.String())
		}
	})
	b.start(c)
	return b, conn
}

// freeAddr is a loopback address no one listens on now.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	return addr
}

// sessionsPerGateway counts the open sessions of a tenant's nodes (every
// tenant's when empty) by the gateway that holds them. A gateway killed
// with -9 closes none: its count drops as its nodes open sessions
// elsewhere.
func (c *cluster) sessionsPerGateway(tenantID string) map[string]int {
	c.t.Helper()
	rows, err := c.srv.Pool.Query(context.Background(), `SELECT session_gateway, count(*) FROM nodes
		WHERE ($1 = '' OR tenant_id = $1) AND session_opened_at IS NOT NULL AND session_closed_at IS NULL GROUP BY 1`, tenantID)
	require.NoError(c.t, err)
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var gw string
		var n int
		require.NoError(c.t, rows.Scan(&gw, &n))
		out[gw] = n
	}
	require.NoError(c.t, rows.Err())
	return out
}

// commandsOf counts a tenant's commands in state.
func (c *cluster) commandsOf(tenantID, state string) int {
	c.t.Helper()
	var n int
	require.NoError(c.t, c.srv.Pool.QueryRow(context.Background(), `SELECT count(*) FROM commands WHERE tenant_id = $1 AND state = $2`, tenantID, state).Scan(&n))
	return n
}

// openCommandsOf counts a tenant's commands not yet settled.
func (c *cluster) openCommandsOf(tenantID string) int {
	c.t.Helper()
	var n int
	require.NoError(c.t, c.srv.Pool.QueryRow(context.Background(), `SELECT count(*) FROM commands WHERE tenant_id = $1 AND settled_at IS NULL`, tenantID).Scan(&n))
	return n
}
