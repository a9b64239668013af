package e2e

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/better-compute/commands/controlplane/fakedaemon"
	"github.com/better-compute/commands/controlplane/kinds"
	"github.com/better-compute/commands/controlplane/queue"
	"github.com/better-compute/commands/controlplane/server/servertest"
	"github.com/better-compute/commands/internal/testutil"
	agentv1 "github.com/better-compute/commands/proto/bc/agent/v1"
	apiv1 "github.com/better-compute/commands/proto/bc/api/v1"
	"github.com/better-compute/commands/sdk/kind"
)

// simNode is a simulated node (bc-sim's FakeDaemon) holding a session on
// the cluster's gateway, reconnecting as bcd does when it ends.
type simNode struct {
	d      *fakedaemon.Daemon
	cancel context.CancelFunc
	done   chan struct{}
}

// startSim joins id and opens its session; script decides each command's
// outcome. The node reports every registered kind with the registry's
// digest, e2e kinds included.
func (c *cluster) startSim(id string, script fakedaemon.Script) *simNode {
	c.t.Helper()
	conn, err := grpc.NewClient(c.srv.Gateway, grpc.WithTransportCredentials(c.srv.JoinNode(c.t, id)))
	require.NoError(c.t, err)
	c.t.Cleanup(func() { _ = conn.Close() })
	d := fakedaemon.New(id)
	d.Script = script
	for _, m := range c.registered() {
		d.Kinds = append(d.Kinds, &agentv1.KindDigest{Kind: m.Kind, Digest: m.Digest()})
	}
	ctx, cancel := context.WithCancel(context.Background())
	n := &simNode{d: d, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(n.done)
		for ctx.Err() == nil {
			_ = d.Run(ctx, conn)
			select {
			case <-ctx.Done():
			case <-time.After(200 * time.Millisecond):
			}
		}
	}()
	c.t.Cleanup(func() { cancel(); <-n.done })
	testutil.WaitFor(c.t, 30*time.Second, id+"'s session", func() bool { return d.Welcome() != nil })
	return n
}

// registered is every kind the server registers: the built-in manifests and
// the e2e kinds of its kinds directory.
func (c *cluster) registered() []kind.Manifest {
	c.t.Helper()
	out := append([]kind.Manifest(nil), servertest.Manifests()...)
	b, err := os.ReadFile(filepath.Join(c.cfg.KindsDir, "e2e.json"))
	require.NoError(c.t, err)
	ms, err := kinds.ParseManifests(b)
	require.NoError(c.t, err)
	return append(out, ms...)
}

// addNodes registers nodes of tenant a and labels them.
func (c *cluster) addNodes(labels map[string]string, ids ...string) {
	c.t.Helper()
	nodes := apiv1.NewNodesClient(c.conn)
	for _, id := range ids {
		if id != servertest.NodeA1 {
			_, err := c.srv.Queue.CreateNode(context.Background(), c.srv.Pool, queue.Node{ID: id, TenantID: servertest.TenantA})
			require.NoError(c.t, err)
		}
		if labels != nil {
			n, err := nodes.SetLabels(c.ctx(), &apiv1.SetNodeLabelsRequest{TenantId: servertest.TenantA, NodeId: id, Labels: labels})
			require.NoError(c.t, err)
			require.Equal(c.t, labels, n.GetLabels())
		}
	}
}

// openSampler samples how many of a run's commands are open, every few
// milliseconds, until stopped; it returns the most it saw.
func (c *cluster) openSampler(runID *atomic.Value) (stop func() int) {
	var (
		most int64
		wg   sync.WaitGroup
	)
	done := make(chan struct{})
	wg.Go(func() {
		for {
			select {
			case <-done:
				return
			case <-time.After(5 * time.Millisecond):
			}
			id, _ := runID.Load().(string)
			if id == "" {
				continue
			}
			var n int64
			if err := c.srv.Pool.QueryRow(context.Background(), `SELECT count(*) FROM commands
				WHERE idempotency_key LIKE 'run:' || $1 || ':%' AND settled_at IS NULL`, id).Scan(&n); err != nil {
				continue
			}
			if n > atomic.LoadInt64(&most) {
				atomic.StoreInt64(&most, n)
			}
		}
	})
	return func() int {
		close(done)
		wg.Wait()
		return int(atomic.LoadInt64(&most))
	}
}

func (c *cluster) waitRun(id string, states ...string) *apiv1.FleetRun {
	c.t.Helper()
	runs := apiv1.NewFleetRunsClient(c.conn)
	var run *apiv1.FleetRun
	testutil.WaitFor(c.t, 90*time.Second, "run "+id+" to be "+states[0], func() bool {
		got, err := runs.Get(c.ctx(), &apiv1.GetFleetRunRequest{TenantId: servertest.TenantA, RunId: id})
		if err != nil {
			return false
		}
		run = got
		for _, s := range states {
			if got.GetState() == s {
				return true
			}
		}
		return false
	})
	return run
}

// "An end-to-end test on real bcd nodes and bc-sim nodes: a run over a label
// selector with maxConcurrency 2 and maxErrors 1 where two nodes fail; the
// open count never exceeded 2; the run stopped with the rest not-started;
// the failures table names the nodes and reasons."
func TestE2E_FleetRunOverASelectorStopsPastItsErrorLimit(t *testing.T) {
	c := newCluster(t)
	fleet := map[string]string{"fleet": "e2e", "gpu": "h200"}
	c.addNodes(fleet, servertest.NodeA1, "node_a2", "node_a3", "node_a4", "node_a5", "node_a6")
	c.addNodes(map[string]string{"fleet": "other"}, "node_a7")
	// Two real bcds: node_a1 runs first and holds until released; node_a4
	// would run later.
	real1, real4 := c.joinAs(servertest.NodeA1), c.joinAs("node_a4")
	real1.start()
	real4.start()
	fail := func(*agentv1.Command) fakedaemon.Action {
		return fakedaemon.Action{Kind: fakedaemon.Fail, Reason: "xid-79"}
	}
	ok := func(*agentv1.Command) fakedaemon.Action { return fakedaemon.Action{Kind: fakedaemon.Succeed} }
	sims := map[string]*simNode{
		"node_a2": c.startSim("node_a2", fail), "node_a3": c.startSim("node_a3", fail),
		"node_a5": c.startSim("node_a5", ok), "node_a6": c.startSim("node_a6", ok), "node_a7": c.startSim("node_a7", ok),
	}

	h := newHold(t)
	payload, err := structpb.NewStruct(h.payload())
	require.NoError(t, err)
	var runID atomic.Value
	stop := c.openSampler(&runID)
	runs := apiv1.NewFleetRunsClient(c.conn)
	run, err := runs.Create(c.ctx(), &apiv1.CreateFleetRunRequest{TenantId: servertest.TenantA, Kind: kindHold, Payload: payload,
		Targets: &apiv1.FleetRunTargets{Selector: "fleet=e2e,gpu in (h200,b200)"}, MaxConcurrency: "2", MaxErrors: "1", IdempotencyKey: "e2e-run"})
	require.NoError(t, err)
	runID.Store(run.GetId())
	require.Equal(t, uint32(6), run.GetCounts().GetTargets(), "node_a7's label does not match")
	require.Equal(t, "ops", run.GetRequester())

	// node_a1 holds; node_a2 and node_a3 fail; the third failure never comes.
	h.waitStarted(t)
	got := c.waitRun(run.GetId(), "stopping")
	require.Equal(t, "max-errors", got.GetStateReason())
	h.releaseNow(t)
	got = c.waitRun(run.GetId(), "failed")
	most := stop()
	require.LessOrEqual(t, most, 2, "the open count never exceeded 2")
	require.Equal(t, "max-errors", got.GetStateReason())
	require.Equal(t, uint32(1), got.GetCounts().GetSucceeded(), "node_a1")
	require.Equal(t, uint32(2), got.GetCounts().GetFailures())
	require.Equal(t, uint32(3), got.GetCounts().GetNotStarted(), "node_a4, node_a5, node_a6")

	fails, err := runs.ListTargets(c.ctx(), &apiv1.ListFleetRunTargetsRequest{TenantId: servertest.TenantA, RunId: run.GetId(), State: "failures"})
	require.NoError(t, err)
	var named []string
	for _, f := range fails.GetItems() {
		named = append(named, f.GetNodeId())
		require.Equal(t, "failed", f.GetState())
		require.Equal(t, "xid-79", f.GetReason())
	}
	require.ElementsMatch(t, []string{"node_a2", "node_a3"}, named)
	rest, err := runs.ListTargets(c.ctx(), &apiv1.ListFleetRunTargetsRequest{TenantId: servertest.TenantA, RunId: run.GetId(), State: "not-started"})
	require.NoError(t, err)
	for _, r := range rest.GetItems() {
		require.Equal(t, "max-errors", r.GetReason())
	}
	require.Equal(t, 1, h.runs(t), "only node_a1's bcd ran the kind")
	require.Empty(t, sims["node_a5"].d.Received(), "a not-started node never got a command")
	require.Empty(t, sims["node_a7"].d.Received())

	// The run's commands are ordinary commands: listed across the tenant by
	// run, with who asked and how.
	list, err := c.api.List(c.ctx(), &apiv1.ListCommandsRequest{TenantId: servertest.TenantA, RunId: run.GetId()})
	require.NoError(t, err)
	require.Len(t, list.GetItems(), 3)
	for _, cmd := range list.GetItems() {
		require.Equal(t, "ops", cmd.GetRequester())
		require.Equal(t, "fleet-run", cmd.GetRequestedVia())
		require.Equal(t, run.GetId(), cmd.GetRunId())
	}
	failed, err := c.api.List(c.ctx(), &apiv1.ListCommandsRequest{TenantId: servertest.TenantA, State: "failed", Kind: kindHold})
	require.NoError(t, err)
	require.Len(t, failed.GetItems(), 2, "what failed, across the tenant")
	byID, err := c.api.Get(c.ctx(), &apiv1.GetCommandRequest{TenantId: servertest.TenantA, CommandId: failed.GetItems()[0].GetId()})
	require.NoError(t, err, "commands.get by id alone")
	require.Equal(t, "xid-79", byID.GetReason())
	again, err := runs.Create(c.ctx(), &apiv1.CreateFleetRunRequest{TenantId: servertest.TenantA, Kind: kindHold, Payload: payload,
		Targets: &apiv1.FleetRunTargets{Selector: "fleet=e2e"}, IdempotencyKey: "e2e-run"})
	require.NoError(t, err)
	require.Equal(t, run.GetId(), again.GetId(), "a retry with the same key returns the same run")
}
