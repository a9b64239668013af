package e2e

// The health reconciler end to end: the real control plane (servertest:
// API, gateway, sweeper and the modules component with River) on a real
// PostgreSQL, and fourteen nodes speaking the real session protocol over
// mTLS through the real gateway (the control plane's fakedaemon: fourteen
// bcd processes would not fit this machine's two cores; the remediation
// test runs the real bcd). A node "reboots" by ending its session and coming
// back with a new boot id, as bcd does after systemctl reboot, and then
// reports RebootRequired False.

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/better-compute/commands/controlplane/commands/queue"
	"github.com/better-compute/commands/controlplane/modules/remediation"
	"github.com/better-compute/commands/controlplane/server"
	"github.com/better-compute/commands/controlplane/server/servertest"
	"github.com/better-compute/commands/controlplane/testing/fakedaemon"
	"github.com/better-compute/commands/internal/testutil"
	agentv1 "github.com/better-compute/commands/proto/bc/agent/v1"
)

// fakeNode is one node of the fleet: a fake daemon and its session.
type fakeNode struct {
	t    *testing.T
	d    *fakedaemon.Daemon
	conn *grpc.ClientConn
	// lock guards cancel and done, which a reboot replaces.
	lock   sync.Mutex
	cancel context.CancelFunc
	done   chan struct{}
}

func rebootRequired(on bool) *agentv1.NodeStatus {
	return &agentv1.NodeStatus{Conditions: []*agentv1.NodeCondition{{Type: "RebootRequired", Status: on,
		Reason: "reboot-required-file", Message: "packages wait for a reboot: linux-image-6.1", Since: timestamppb.Now()}}}
}

func startFakeNode(t *testing.T, r *servertest.Running, nodeID string, fail bool) *fakeNode {
	t.Helper()
	conn, err := grpc.NewClient(r.Gateway, grpc.WithTransportCredentials(r.JoinNode(t, nodeID)))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	d := fakedaemon.New(nodeID)
	for _, m := range r.Queue.Registry().All() {
		d.Kinds = append(d.Kinds, &agentv1.KindDigest{Kind: m.Kind, Digest: m.Digest()})
	}
	d.Status = rebootRequired(true)
	n := &fakeNode{t: t, d: d, conn: conn}
	d.Script = func(cmd *agentv1.Command) fakedaemon.Action {
		if cmd.GetKind() != "node.reboot" {
			return fakedaemon.Action{Kind: fakedaemon.Succeed}
		}
		if fail {
			return fakedaemon.Action{Kind: fakedaemon.Fail, Reason: "reboot-failed"}
		}
		// systemctl reboot: the command runs until the node goes down.
		go n.reboot()
		return fakedaemon.Action{Kind: fakedaemon.Hang}
	}
	n.run()
	t.Cleanup(n.stop)
	testutil.WaitFor(t, 30*time.Second, nodeID+"'s session", func() bool { return d.Welcome() != nil })
	return n
}

func (n *fakeNode) run() {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	n.lock.Lock()
	n.cancel, n.done = cancel, done
	n.lock.Unlock()
	go func() {
		defer close(done)
		// As bcd does, a session that ends comes back (with a backoff)
		// until the node goes down.
		for ctx.Err() == nil {
			if err := n.d.Run(ctx, n.conn); err != nil && ctx.Err() == nil {
				n.t.Logf("%s: session ended: %v; reconnecting", n.d.NodeID, err)
			}
			select {
			case <-ctx.Done():
			case <-time.After(200 * time.Millisecond):
			}
		}
	}()
}

func (n *fakeNode) stop() {
	n.lock.Lock()
	cancel, done := n.cancel, n.done
	n.lock.Unlock()
	cancel()
	<-done
}

// reboot takes the node down a moment after the command started (the time
// a host takes to go down and come back), and back with a new boot id and
// RebootRequired False.
func (n *fakeNode) reboot() {
	<-time.After(300 * time.Millisecond) // the reboot's own duration, not a synchronisation
	n.stop()
	n.d.Reboot()
	n.d.Status = rebootRequired(false)
	n.run()
}

type interval struct {
	node          string
	start, settle time.Time
}

// maxOverlap is the most intervals open at one instant.
func maxOverlap(iv []interval) int {
	type edge struct {
		at    time.Time
		delta int
	}
	var es []edge
	for _, i := range iv {
		es = append(es, edge{i.start, 1}, edge{i.settle, -1})
	}
	sort.Slice(es, func(a, b int) bool {
		if es[a].at.Equal(es[b].at) {
			return es[a].delta < es[b].delta
		}
		return es[a].at.Before(es[b].at)
	})
	cur, best := 0, 0
	for _, e := range es {
		cur += e.delta
		best = max(best, cur)
	}
	return best
}

// "RebootRequired on 10 nodes of a pool whose budget is 2 → never more than
// 2 nodes rebooting at once (asserted from the commands' own timestamps),
// all 10 done; a pool whose nodes keep failing trips the breaker and
// nothing more is sent."
func TestE2E_ReconcilerRebootsWithinTheBudgetAndTheBreakerStopsAFailingPool(t *testing.T) {
	r := servertest.Start(t, func(cfg *server.Config) {
		cfg.Modules.Reconciler.Enabled = true
		cfg.Modules.Interval = server.Duration(300 * time.Millisecond)
	})
	c := &cluster{t: t, srv: r}
	ctx := context.Background()
	mk := func(pool string, n int) []string {
		var out []string
		for i := range n {
			id := fmt.Sprintf("node_%s_%02d", pool, i)
			_, err := r.Queue.CreateNode(ctx, r.Pool, queue.Node{ID: id, TenantID: servertest.TenantA, Pool: pool})
			require.NoError(t, err)
			out = append(out, id)
		}
		return out
	}
	good, bad := mk("rack1", 10), mk("rack2", 4)
	out, stderr, code := c.cli("pools", "set-budget", "pool=rack1", "maxConcurrent=2")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, out, "rack1")
	_, stderr, code = c.cli("pools", "set-budget", "pool=rack2", "maxConcurrent=1", "breakerFailures=2", "breakerWindowSeconds=3600")
	require.Equal(t, 0, code, stderr)
	for _, id := range good {
		startFakeNode(t, r, id, false)
	}
	for _, id := range bad {
		startFakeNode(t, r, id, true)
	}

	remediations := func(pool string) []remediation.Row {
		rows, err := remediation.List(ctx, r.Pool, remediation.ListParams{TenantID: servertest.TenantA, Pool: pool, IncludeFinished: true})
		require.NoError(t, err)
		return rows
	}
	testutil.WaitFor(t, 3*time.Minute, "all 10 reboots of rack1 done and verified", func() bool {
		done := 0
		for _, x := range remediations("rack1") {
			if x.State == remediation.StateDone && x.Outcome == remediation.OutcomeVerified {
				done++
			}
		}
		return done == 10
	})
	var iv []interval
	rows, err := r.Pool.Query(ctx, `SELECT c.node_id, c.created_at, c.settled_at, c.state, c.rebooted, c.batch_id FROM commands c JOIN nodes n ON n.id = c.node_id
		WHERE n.pool = 'rack1' AND c.kind = 'node.reboot' ORDER BY c.created_at`)
	require.NoError(t, err)
	seen := map[string]int{}
	for rows.Next() {
		var (
			i        interval
			settled  *time.Time
			state    string
			rebooted bool
			batch    string
		)
		require.NoError(t, rows.Scan(&i.node, &i.start, &settled, &state, &rebooted, &batch))
		require.NotNil(t, settled)
		require.Equal(t, "succeeded", state)
		require.True(t, rebooted, "a new boot completed it")
		require.NotEmpty(t, batch, "under a platform batch")
		i.settle = *settled
		iv = append(iv, i)
		seen[i.node]++
	}
	require.NoError(t, rows.Err())
	require.Len(t, iv, 10, "one reboot per node")
	require.Len(t, seen, 10)
	peak := maxOverlap(iv)
	t.Logf("rack1: %d reboots, at most %d at once (budget 2)", len(iv), peak)
	require.LessOrEqual(t, peak, 2, "never more than 2 nodes rebooting at once")
	require.GreaterOrEqual(t, peak, 1)

	// rack2: every reboot fails; the second failure trips the breaker.
	t.Cleanup(func() {
		if t.Failed() {
			for _, x := range remediations("rack2") {
				t.Logf("rack2 %s %s %s %s: %s %s", x.NodeID, x.State, x.Outcome, x.WaitingReason, x.WaitingMessage, x.OutcomeMessage)
			}
		}
	})
	testutil.WaitFor(t, 2*time.Minute, "rack2's breaker to trip and its other nodes to wait on it", func() bool {
		waiting := 0
		for _, x := range remediations("rack2") {
			if x.State == remediation.StateWaiting && x.WaitingReason == "breaker-open" {
				waiting++
			}
		}
		return waiting == 2
	})
	var sent, alerts int
	require.NoError(t, r.Pool.QueryRow(ctx, `SELECT count(*) FROM commands c JOIN nodes n ON n.id = c.node_id WHERE n.pool = 'rack2' AND c.kind = 'node.reboot'`).Scan(&sent))
	require.Equal(t, 2, sent, "after the breaker tripped nothing more is sent")
	require.NoError(t, r.Pool.QueryRow(ctx, `SELECT count(*) FROM outbox WHERE topic = 'pool.breaker.tripped' AND payload->>'pool' = 'rack2'`).Scan(&alerts))
	require.Equal(t, 1, alerts, "the breaker raised an alert event")
	out, stderr, code = c.cli("pools", "list")
	require.Equal(t, 0, code, stderr)
	require.Regexp(t, `rack2\s+4\s+0\s+1\s+.*OPEN since`, out)
	out, stderr, code = c.cli("reconciler", "plan", "pool=rack2")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, out, "breaker-open: pool rack2's breaker is open")
	out, stderr, code = c.cli("reconciler", "batches")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, out, "platform:health")
	out, stderr, code = c.cli("pools", "reset-breaker", "pool=rack2")
	require.Equal(t, 0, code, stderr)
	require.Regexp(t, `rack2\s.*closed`, out)
}
