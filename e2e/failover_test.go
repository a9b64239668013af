//go:build ha

package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"runtime/pprof"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/better-compute/commands/controlplane/commands/queue"
	"github.com/better-compute/commands/controlplane/commands/sweeper"
	"github.com/better-compute/commands/controlplane/server/servertest"
	"github.com/better-compute/commands/internal/testutil"
	apiv1 "github.com/better-compute/commands/proto/bc/api/v1"
)

// lease is the sweeper's row in leader_leases.
type lease struct {
	holder, term       string
	elected, expiresAt time.Time
}

func (c *cluster) lease(t *testing.T) (lease, bool) {
	var l lease
	err := c.srv.Pool.QueryRow(context.Background(), `SELECT holder, term, elected_at, expires_at FROM leader_leases WHERE name = $1`,
		sweeper.LeaseName).Scan(&l.holder, &l.term, &l.elected, &l.expiresAt)
	return l, err == nil
}

// acked is one commands.run the API acknowledged.
type acked struct {
	id, node string
	// sent is when the call went out, at when its answer came.
	sent, at time.Time
}

// TestFailover is the PostgreSQL failover test that scripts/ha-test runs
// (make ha-test) against the pg_auto_failover formation it starts:
// bc-server on the multi-host connection string in BC_HA_DATABASE_URL,
// three real bcd nodes, four clients calling commands.run without pause,
// and the primary killed by BC_HA_KILL_PRIMARY under that load. "Every
// acknowledged commands.run survives the failover, sessions reconnect, the
// sweeper's lease moves, every command reaches exactly one terminal state."
func TestFailover(t *testing.T) {
	dsn, kill := os.Getenv("BC_HA_DATABASE_URL"), os.Getenv("BC_HA_KILL_PRIMARY")
	if dsn == "" || kill == "" {
		t.Fatal("BC_HA_DATABASE_URL and BC_HA_KILL_PRIMARY are unset: run make ha-test, which starts the formation")
	}
	c := newClusterOn(t, dsn)
	ctx := context.Background()
	ids := []string{servertest.NodeA1, "node_ha2", "node_ha3"}
	for _, id := range ids[1:] {
		_, err := c.srv.Queue.CreateNode(ctx, c.srv.Pool, queue.Node{ID: id, TenantID: servertest.TenantA})
		require.NoError(t, err)
	}
	nodes := map[string]*node{}
	for _, id := range ids {
		n := c.joinAs(id)
		n.start()
		nodes[id] = n
	}
	h := newHold(t)
	h.releaseNow(t) // every run finishes at once
	payload, err := structpb.NewStruct(h.payload())
	require.NoError(t, err)

	var (
		lock       sync.Mutex
		acks       []acked
		failures   int
		killedAt   time.Time
		afterKill  int
		stop       = make(chan struct{})
		wg         sync.WaitGroup
		enoughKill = make(chan struct{})
		closeOnce  sync.Once
	)
	const clients, wantAfter = 4, 30
	for cl := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				nodeID := ids[(cl+i)%len(ids)]
				sent := time.Now()
				rctx, cancel := context.WithTimeout(c.ctx(), 5*time.Second)
				cmd, err := c.api.Run(rctx, &apiv1.RunCommandRequest{TenantId: servertest.TenantA, NodeId: nodeID, Kind: kindHold,
					Payload: payload, IdempotencyKey: fmt.Sprintf("ha-%d-%d", cl, i)})
				cancel()
				now := time.Now()
				lock.Lock()
				if err != nil {
					failures++ // not acknowledged: nothing is promised
				} else {
					acks = append(acks, acked{id: cmd.GetId(), node: nodeID, sent: sent, at: now})
					if !killedAt.IsZero() && sent.After(killedAt) {
						afterKill++
						if afterKill >= wantAfter {
							closeOnce.Do(func() { close(enoughKill) })
						}
					}
				}
				lock.Unlock()
			}
		}()
	}
	// Load before the kill.
	testutil.WaitFor(t, 60*time.Second, "acknowledged commands before the kill", func() bool {
		lock.Lock()
		defer lock.Unlock()
		return len(acks) >= 50
	})
	// A fleet run in flight across the failover (issue 34: "It also checks
	// ... the fleet runs across the failover"): one node at a time, its
	// first command holding until after the kill.
	runHold := newHold(t)
	runPayload, err := structpb.NewStruct(runHold.payload())
	require.NoError(t, err)
	fleetRuns := apiv1.NewFleetRunsClient(c.conn)
	run, err := fleetRuns.Create(c.ctx(), &apiv1.CreateFleetRunRequest{TenantId: servertest.TenantA, Kind: kindHold, Payload: runPayload,
		Targets: &apiv1.FleetRunTargets{NodeIds: ids}, MaxConcurrency: "1", IdempotencyKey: "ha-run"})
	require.NoError(t, err)
	runHold.waitStarted(t)

	before, ok := c.lease(t)
	require.True(t, ok, "the sweeper holds its lease before the kill")
	sessionsBefore := map[string]int{}
	for id, n := range nodes {
		sessionsBefore[id] = n.sessions()
	}

	var portBefore int
	require.NoError(t, c.srv.Pool.QueryRow(ctx, `SELECT inet_server_port()`).Scan(&portBefore))
	out, err := exec.Command(kill).CombinedOutput()
	require.NoError(t, err, "killing the primary: %s", out)
	lock.Lock()
	killedAt = time.Now()
	ackedBefore := len(acks)
	lock.Unlock()
	t.Logf("ha: killed the primary on port %s after %d acknowledged commands", strings.TrimSpace(string(out)), ackedBefore)
	runHold.releaseNow(t)

	select {
	case <-enoughKill:
	case <-time.After(3 * time.Minute):
		close(stop)
		wg.Wait()
		t.Fatalf("fewer than %d commands acknowledged in the 3 minutes after the kill: the new primary never took writes", wantAfter)
	}
	close(stop)
	wg.Wait()
	var firstAfter time.Time
	for _, a := range acks {
		if a.sent.After(killedAt) && (firstAfter.IsZero() || a.at.Before(firstAfter)) {
			firstAfter = a.at
		}
	}
	var portAfter int
	require.NoError(t, c.srv.Pool.QueryRow(ctx, `SELECT inet_server_port()`).Scan(&portAfter))
	require.NotEqual(t, portBefore, portAfter, "the server writes to the other node: the standby was promoted")
	t.Logf("ha: the primary moved from port %d to port %d", portBefore, portAfter)
	t.Logf("ha: writes resumed %s after the kill (%d calls failed meanwhile, none acknowledged)", firstAfter.Sub(killedAt).Round(time.Millisecond), failures)

	// Every acknowledged command is present on the new primary and
	// reaches a terminal state, exactly one: one command.settled each.
	all := make([]string, len(acks))
	for i, a := range acks {
		all[i] = a.id
	}
	var present, terminal int
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		// What did not settle, and where it stopped.
		rows, err := c.srv.Pool.Query(context.Background(), `SELECT id, node_id, state, attempts, dispatched_epoch, waiting_reason FROM commands
			WHERE id = ANY($1) AND NOT bc_state_terminal(state) ORDER BY seq`, all)
		if err != nil {
			t.Logf("ha: reading the unsettled commands: %v", err)
			return
		}
		defer rows.Close()
		for rows.Next() {
			var id, node, state, waiting string
			var attempts int
			var epoch int64
			if err := rows.Scan(&id, &node, &state, &attempts, &epoch, &waiting); err == nil {
				t.Logf("ha: unsettled: %s on %s: %s, %d attempts, dispatched in epoch %d, waiting %q", id, node, state, attempts, epoch, waiting)
			}
		}
	})
	// A failure from here on is a hang somewhere: the control plane's
	// goroutines (it runs in this process) go in the log, and each bcd
	// dumps its own (SIGQUIT; its log is printed at cleanup).
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		var b strings.Builder
		_ = pprof.Lookup("goroutine").WriteTo(&b, 2)
		t.Logf("ha: the control plane's goroutines:\n%s", b.String())
		for _, n := range nodes {
			if n.proc != nil && n.proc.Process.Signal(syscall.SIGQUIT) == nil {
				select {
				case <-n.done: // dumped and exited
				case <-time.After(5 * time.Second):
				}
			}
		}
	})
	testutil.WaitFor(t, 3*time.Minute, "every acknowledged command to settle", func() bool {
		err := c.srv.Pool.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE bc_state_terminal(state)) FROM commands WHERE id = ANY($1)`, all).
			Scan(&present, &terminal)
		return err == nil && terminal == len(all)
	})
	states := map[string]int{}
	rows, err := c.srv.Pool.Query(ctx, `SELECT state, count(*) FROM commands WHERE id = ANY($1) GROUP BY state`, all)
	require.NoError(t, err)
	for rows.Next() {
		var s string
		var n int
		require.NoError(t, rows.Scan(&s, &n))
		states[s] = n
	}
	require.NoError(t, rows.Err())
	var once, notOnce int
	require.NoError(t, c.srv.Pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE n = 1), count(*) FILTER (WHERE n <> 1) FROM (
		SELECT c.id, (SELECT count(*) FROM outbox o WHERE o.topic = 'command.settled' AND o.payload->>'commandId' = c.id) AS n
		FROM commands c WHERE c.id = ANY($1)) s`, all).Scan(&once, &notOnce))

	// The sweeper leads again on the new primary, in a term elected after
	// the old one lapsed with the old primary.
	var after lease
	testutil.WaitFor(t, time.Minute, "the sweeper's lease on the new primary", func() bool {
		l, ok := c.lease(t)
		after = l
		return ok && l.term != before.term && l.expiresAt.After(time.Now())
	})

	// The sessions carried the nodes through: each node ran commands
	// acknowledged after the kill.
	ranAfter := map[string]int{}
	for _, a := range acks {
		if a.sent.After(killedAt) {
			ranAfter[a.node]++
		}
	}
	reconnects := 0
	for id, n := range nodes {
		reconnects += n.sessions() - sessionsBefore[id]
		require.Positive(t, ranAfter[id], "node %s ran commands acknowledged after the failover", id)
	}

	lost := len(all) - present
	t.Logf("ha: sweeper lease: holder %s term %s… before, holder %s term %s… after (elected %s after the kill)",
		before.holder, before.term[:8], after.holder, after.term[:8], after.elected.Sub(killedAt).Round(time.Millisecond))
	t.Logf("ha: sessions: %d nodes, %d new sessions opened after the kill; every node ran commands acknowledged after it", len(nodes), reconnects)
	t.Logf("ha: states %v; exactly one command.settled: %d, not exactly one: %d", states, once, notOnce)
	t.Logf("ha: acknowledged %d (%d after the kill), present %d, lost: %d", len(all), afterKill, present, lost)
	require.Zero(t, lost, "every acknowledged commands.run survives the failover")
	require.Equal(t, len(all), terminal)
	require.Zero(t, notOnce, "every command reaches exactly one terminal state")

	// The fleet run carried on over the new primary: it ends succeeded,
	// one command per node, each exactly once, and the limit of one held.
	got := c.waitRun(run.GetId(), "succeeded", "failed", "cancelled")
	require.Equal(t, "succeeded", got.GetState(), "%s %s", got.GetStateReason(), got.GetStateMessage())
	require.Equal(t, uint32(3), got.GetCounts().GetSucceeded())
	var perNode, runRuns int
	require.NoError(t, c.srv.Pool.QueryRow(ctx, `SELECT count(DISTINCT node_id), count(*) FROM commands WHERE idempotency_key LIKE 'run:' || $1 || ':%'`,
		run.GetId()).Scan(&perNode, &runRuns))
	require.Equal(t, 3, perNode)
	require.Equal(t, 3, runRuns, "no node started twice across the failover")
	require.Equal(t, 3, runHold.runs(t), "each node ran the run's command once")
	t.Logf("ha: fleet run %s across the failover: %s, %d of 3 succeeded, one command per node", run.GetId(), got.GetState(), got.GetCounts().GetSucceeded())
}
