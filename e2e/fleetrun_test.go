package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/better-compute/commands/controlplane/commands/kinds"
	"github.com/better-compute/commands/controlplane/commands/queue"
	"github.com/better-compute/commands/controlplane/server"
	"github.com/better-compute/commands/controlplane/server/serverconfig"
	"github.com/better-compute/commands/controlplane/server/servertest"
	"github.com/better-compute/commands/controlplane/testing/fakedaemon"
	"github.com/better-compute/commands/internal/pgtest"
	"github.com/better-compute/commands/internal/testutil"
	"github.com/better-compute/commands/internal/trust"
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

// "A destructive run of node.reboot under a 2-of-3 quorum: one approval for
// the run; each node verifies its leaf; the pool budget holds." The
// reboot kind here is the e2e plugin's (destructive and self-terminating,
// as node.reboot is), on three real bcds that hold the approver keys in
// their trust bundle and check each command's approval and leaf
// themselves. The run's batch names all three; nothing starts until two
// approvers signed it, once; then the pool's budget (maxConcurrent 1, the
// default) lets one node reboot at a time although the run allows all.
func TestE2E_DestructiveFleetRunUnderTheQuorumAndThePoolBudget(t *testing.T) {
	approvers, keys := approverKeys(t, "alice", "bob", "carol")
	signing, _ := servertest.Signing(t)
	c := newCluster(t, func(cfg *server.Config) {
		signing(cfg)
		cfg.PKI.Approvers, cfg.PKI.ApprovalThreshold = approvers, 2
	})
	ids := []string{servertest.NodeA1, "node_r2", "node_r3"}
	c.addNodes(map[string]string{"rack": "r1"}, ids...)
	nodes := map[string]*node{}
	for _, id := range ids {
		nodes[id] = c.joinAs(id)
		nodes[id].start()
	}
	var runID atomic.Value
	stop := c.openSampler(&runID)
	runs := apiv1.NewFleetRunsClient(c.conn)
	run, err := runs.Create(c.ctx(), &apiv1.CreateFleetRunRequest{TenantId: servertest.TenantA, Kind: kindReboot,
		Targets: &apiv1.FleetRunTargets{Selector: "rack=r1"}, MaxConcurrency: "100%", Reason: "kernel 6.1.0-28"})
	require.NoError(t, err)
	runID.Store(run.GetId())
	require.NotEmpty(t, run.GetBatchId(), "a destructive run goes under one batch")
	batch, err := apiv1.NewCommandBatchesClient(c.conn).Get(c.ctx(), &apiv1.GetCommandBatchRequest{TenantId: servertest.TenantA, BatchId: run.GetBatchId()})
	require.NoError(t, err)
	var leaves []string
	for _, l := range batch.GetScope() {
		require.Equal(t, kindReboot, l.GetKind())
		leaves = append(leaves, l.GetSubject())
	}
	require.ElementsMatch(t, ids, leaves, "its leaves name every target node")
	got := c.waitRun(run.GetId(), "running")
	testutil.WaitFor(t, 30*time.Second, "the run to say it awaits approval", func() bool {
		got = c.waitRun(run.GetId(), "running")
		return got.GetWaitingReason() == "awaiting-approval"
	})
	require.Contains(t, got.GetWaitingMessage(), "better-compute batch approve")

	out, stderr, code := c.cliAs(servertest.TokAdmin, "batch", "approve", "--batch", run.GetBatchId(), "--key", keys["alice"])
	require.Equal(t, 0, code, stderr)
	require.Contains(t, out, "1 more approval(s) needed")
	require.Equal(t, uint32(0), c.waitRun(run.GetId(), "running").GetCounts().GetStarted(), "one approval starts nothing")
	_, stderr, code = c.cliAs(servertest.TokAdmin, "batch", "approve", "--batch", run.GetBatchId(), "--key", keys["carol"])
	require.Equal(t, 0, code, stderr)

	rebooted := map[string]bool{}
	sawBudgetWait := false
	for len(rebooted) < len(ids) {
		var running *apiv1.Command
		testutil.WaitFor(t, 60*time.Second, "a node of the run to start rebooting", func() bool {
			r, err := runs.Get(c.ctx(), &apiv1.GetFleetRunRequest{TenantId: servertest.TenantA, RunId: run.GetId()})
			if err == nil && r.GetWaitingReason() == "budget-concurrent" {
				sawBudgetWait = true
			}
			list, err := c.api.List(c.ctx(), &apiv1.ListCommandsRequest{TenantId: servertest.TenantA, RunId: run.GetId(), State: "running"})
			if err != nil || len(list.GetItems()) == 0 {
				return false
			}
			running = list.GetItems()[0]
			return true
		})
		id := running.GetNodeId()
		require.False(t, rebooted[id], "node %s started twice", id)
		rebooted[id] = true
		n := nodes[id]
		n.stop()
		require.NoError(t, os.WriteFile(n.boot, []byte("boot-2\n"), 0o600))
		n.start()
		c.waitCommand(id, running.GetId(), "succeeded")
	}
	got = c.waitRun(run.GetId(), "succeeded")
	require.LessOrEqual(t, stop(), 1, "the pool's budget (maxConcurrent 1) holds: one reboot at a time")
	require.True(t, sawBudgetWait, "the run said it waits for the pool's budget")
	require.Equal(t, uint32(3), got.GetCounts().GetSucceeded())
	list, err := c.api.List(c.ctx(), &apiv1.ListCommandsRequest{TenantId: servertest.TenantA, RunId: run.GetId()})
	require.NoError(t, err)
	for _, cmd := range list.GetItems() {
		require.True(t, cmd.GetRebooted())
		require.True(t, cmd.GetSigned())
		require.Equal(t, run.GetBatchId(), cmd.GetBatchId())
		require.Contains(t, nodes[cmd.GetNodeId()].logs.String(), cmd.GetId(), "the node itself ran it, after checking its approval and leaf")
	}
	a, err := apiv1.NewCommandBatchesClient(c.conn).Get(c.ctx(), &apiv1.GetCommandBatchRequest{TenantId: servertest.TenantA, BatchId: run.GetBatchId()})
	require.NoError(t, err)
	require.Len(t, a.GetApprovals(), 2, "one approval of the run, by two approvers")
}

// approverKeys writes an Ed25519 key pair per name and returns the
// approvers' configuration and the private keys' files.
func approverKeys(t *testing.T, names ...string) ([]serverconfig.ApproverConfig, map[string]string) {
	dir := t.TempDir()
	var approvers []serverconfig.ApproverConfig
	keys := map[string]string{}
	for _, name := range names {
		pub, priv, err := trust.NewEd25519()
		require.NoError(t, err)
		pp, err := trust.MarshalPublicKeyPEM(pub)
		require.NoError(t, err)
		kp, err := trust.MarshalPrivateKeyPEM(priv)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(dir, name+".pub"), pp, 0o644))
		require.NoError(t, os.WriteFile(filepath.Join(dir, name+".pem"), kp, 0o600))
		approvers = append(approvers, serverconfig.ApproverConfig{Name: name, PublicKey: filepath.Join(dir, name+".pub")})
		keys[name] = filepath.Join(dir, name+".pem")
	}
	return approvers, keys
}

// waitCommand waits for a command of node id to reach state.
func (c *cluster) waitCommand(nodeID, id, state string) *apiv1.Command {
	c.t.Helper()
	var cmd *apiv1.Command
	testutil.WaitFor(c.t, 60*time.Second, "command "+id+" to be "+state, func() bool {
		got, err := c.api.Get(c.ctx(), &apiv1.GetCommandRequest{TenantId: servertest.TenantA, NodeId: nodeID, CommandId: id})
		if err != nil {
			return false
		}
		cmd = got
		return got.GetState() == state
	})
	return cmd
}

// "kill -9 of bc-server and a PostgreSQL restart during a run: no node over
// the limit, none twice, the run finishes (a test)." Twelve simulated
// nodes each take a moment to run their command; the run allows three at
// once. bc-server (the binary) is killed with SIGKILL once a few nodes
// settled and started again (its advancer waits out the dead one's lease);
// later the database goes away for a few seconds (every connection cut and
// refused, as a PostgreSQL restart does) and comes back. The open count,
// sampled throughout, never passes three; every node got one command (a
// replay after the kill re-sends that same one); the run ends succeeded.
func TestE2E_FleetRunSurvivesKill9AndADatabaseRestart(t *testing.T) {
	proxy := pgtest.NewProxy(t)
	c := newCluster(t, func(cfg *server.Config) {
		pc, err := pgconn.ParseConfig(cfg.DatabaseURL)
		require.NoError(t, err)
		cfg.DatabaseURL = proxy.DSN(pc.Database)
	})
	var ids []string
	for i := range 12 {
		ids = append(ids, fmt.Sprintf("node_k%02d", i))
	}
	c.addNodes(map[string]string{"wave": "k"}, ids...)
	sims := map[string]*simNode{}
	for _, id := range ids {
		sims[id] = c.startSim(id, func(*agentv1.Command) fakedaemon.Action {
			return fakedaemon.Action{Kind: fakedaemon.Succeed, Delay: 300 * time.Millisecond}
		})
	}
	srv := c.swapToBinary()
	var runID atomic.Value
	stop := c.openSampler(&runID)
	runs := apiv1.NewFleetRunsClient(c.conn)
	run, err := runs.Create(c.ctx(), &apiv1.CreateFleetRunRequest{TenantId: servertest.TenantA, Kind: kindHold,
		Targets: &apiv1.FleetRunTargets{Selector: "wave=k"}, MaxConcurrency: "3", MaxErrors: "0"})
	require.NoError(t, err)
	runID.Store(run.GetId())
	settled := func() uint32 {
		var n uint32
		_ = c.srv.Pool.QueryRow(context.Background(), `SELECT count(*) FROM fleet_run_targets WHERE run_id = $1 AND state = 'succeeded'`, run.GetId()).Scan(&n)
		return n
	}
	testutil.WaitFor(t, 60*time.Second, "a few nodes to settle", func() bool { return settled() >= 3 })
	srv.kill()
	srv.start(c)
	testutil.WaitFor(t, 90*time.Second, "more nodes to settle after the restart", func() bool { return settled() >= 7 })
	proxy.Cut()
	// The outage lasts until bc-server has seen it (a failed statement of
	// its gateway, advancer or sweeper), then PostgreSQL is back.
	testutil.WaitFor(t, 60*time.Second, "bc-server to see the database gone", func() bool {
		return strings.Contains(srv.logs.String(), "database unreachable")
	})
	proxy.Restore()
	got := c.waitRun(run.GetId(), "succeeded", "failed", "cancelled")
	require.Equal(t, "succeeded", got.GetState(), "%s: %s", got.GetStateReason(), got.GetStateMessage())
	require.LessOrEqual(t, stop(), 3, "no more than maxConcurrency open, across the kill and the outage")
	require.Equal(t, uint32(12), got.GetCounts().GetSucceeded())
	for _, id := range ids {
		var n int
		require.NoError(t, c.srv.Pool.QueryRow(context.Background(), `SELECT count(*) FROM commands WHERE node_id = $1 AND idempotency_key LIKE 'run:%'`, id).Scan(&n))
		require.Equal(t, 1, n, "node %s got one command", id)
		// A session cut by the kill may deliver the same command again
		// (a replay the node's journal answers); never another one.
		received := map[string]bool{}
		for _, cmd := range sims[id].d.Received() {
			received[cmd.GetId()] = true
		}
		require.Len(t, received, 1, "node %s was sent one command", id)
	}
}
