package sim_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/controlplane/commands/kinds"
	"github.com/better-compute/commands/controlplane/commands/queue"
	"github.com/better-compute/commands/controlplane/front/gateway"
	"github.com/better-compute/commands/controlplane/internal/storetest"
	"github.com/better-compute/commands/controlplane/testing/fakedaemon"
	"github.com/better-compute/commands/controlplane/testing/sim"
	"github.com/better-compute/commands/controlplane/trust/pki"
	"github.com/better-compute/commands/internal/testutil"
	agentv1 "github.com/better-compute/commands/proto/bc/agent/v1"
)

// Issue 34: "bc-sim drives N gateways (the nodes spread across them as a
// load balancer would, and reconnect elsewhere when theirs goes away)".
// Three gateways on one database; 300 simulated nodes spread 100 each; a
// fan-out is in flight (each node takes 300 ms to finish) when the first
// gateway dies. Its nodes re-home to the two others, every command settles
// exactly once and runs once (the fake journal answers a replay), and a
// second fan-out reaches every node on its new gateway.
func TestFleet_NodesRehomeWhenTheirGatewayDies(t *testing.T) {
	t.Parallel()
	pool := storetest.DBConfig(t, func(c *pgxpool.Config) { c.MaxConns = 24 })
	reg, err := kinds.NewRegistry(sim.Kind)
	require.NoError(t, err)
	q := queue.New(reg, hclog.NewNullLogger())
	ca, err := pki.NewCA("sim-test")
	require.NoError(t, err)
	var (
		addrs []string
		gws   []*gateway.Gateway
		kills []func()
	)
	for range 3 {
		ctx, cancel := context.WithCancel(context.Background())
		// Shedding off: this test counts each re-home of the dead
		// gateway's nodes, and the next test has the gateways shed.
		gw := gateway.New(pool, q, hclog.NewNullLogger(), gateway.Options{Shed: gateway.ShedOptions{Off: true}})
		done := make(chan struct{})
		go func() { defer close(done); gw.Run(ctx) }()
		addr, stop, err := sim.Serve(gw, ca)
		require.NoError(t, err)
		var once bool
		kill := func() {
			if !once {
				once = true
				stop()
				cancel()
				<-done
			}
		}
		t.Cleanup(kill)
		addrs, gws, kills = append(addrs, addr), append(gws, gw), append(kills, kill)
	}

	const n = 300
	ctx := context.Background()
	tenantID, nodeIDs, err := sim.Provision(ctx, pool, q, n)
	require.NoError(t, err)
	certs, err := sim.IssueCerts(ca, nodeIDs)
	require.NoError(t, err)
	f, err := sim.StartFleet(ctx, sim.FleetConfig{Addrs: addrs, Rehome: true, RehomeDelay: 100 * time.Millisecond,
		RootCAs: ca.Pool(), NodeIDs: nodeIDs, Certs: certs})
	require.NoError(t, err)
	t.Cleanup(f.Close)
	require.Equal(t, []int{100, 100, 100}, f.PerGateway(), "spread as a round-robin load balancer would")
	for i, gw := range gws {
		require.Equal(t, 100, gw.Sessions(), "gateway %d holds its share", i)
	}
	for _, d := range f.Daemons {
		d.Script = func(*agentv1.Command) fakedaemon.Action {
			return fakedaemon.Action{Kind: fakedaemon.Succeed, Delay: 300 * time.Millisecond}
		}
	}

	target := sim.Target{Pool: pool, Queue: q, TenantID: tenantID, Fleet: f}
	fanout := make(chan error, 1)
	go func() {
		// Its timing rests on the gateways' acks of the terminal reports;
		// the states are read from the database below.
		_, err := sim.Fanout(ctx, target, time.Minute)
		fanout <- err
	}()
	// Mid fan-out: some nodes hold the command, none finished it yet.
	testutil.WaitFor(t, 30*time.Second, "the fan-out to reach nodes of the first gateway", func() bool {
		for i, d := range f.Daemons {
			if i%3 == 0 && len(d.Received()) > 0 {
				return true
			}
		}
		return false
	})
	died := time.Now()
	kills[0]()

	testutil.WaitFor(t, time.Minute, "every node to hold a session on the two gateways left", func() bool {
		return gws[1].Sessions()+gws[2].Sessions() == n
	})
	rehomed := time.Since(died)
	per := f.PerGateway()
	require.Zero(t, per[0])
	require.Equal(t, n, per[1]+per[2])
	if err := <-fanout; err != nil {
		t.Logf("the fan-out's own wait: %v", err)
	}
	requireSettledOnce(t, pool, tenantID, n)
	// The fake forgets a run when its session ends (as a daemon that
	// restarted would), so a command replayed to a re-homed node of the
	// dead gateway may run a second time (sim.noop is retry-safe); the
	// other nodes ran each command once.
	for i, d := range f.Daemons {
		for _, c := range d.Received() {
			if i%3 == 0 {
				require.LessOrEqual(t, d.Runs(c.GetId()), 2, "node %s ran %s", d.NodeID, c.GetId())
			} else {
				require.Equal(t, 1, d.Runs(c.GetId()), "node %s ran %s once", d.NodeID, c.GetId())
			}
		}
	}

	// The re-homed nodes take new commands on their new gateway.
	for _, d := range f.Daemons {
		d.Script = nil
	}
	again, err := sim.Fanout(ctx, target, time.Minute)
	require.NoError(t, err)
	require.Equal(t, n, again.Succeeded)

	times := f.Rehomes()
	require.Len(t, times, n/3, "the first gateway's nodes, each once")
	slices.Sort(times)
	t.Logf("re-home after a gateway died: %d nodes, every session back within %s; per node median %s, max %s (pause 100-200 ms each, jittered)",
		len(times), rehomed.Round(time.Millisecond), times[len(times)/2].Round(time.Millisecond), times[len(times)-1].Round(time.Millisecond))
}

// Issue 34: "Then start it again: new sessions spread across the three
// (... what gateways do to shed load when one holds far more than the
// others)". Three gateways on one database, 300 simulated nodes; the first
// gateway dies and its nodes re-home to the two others, which even out
// between themselves; it starts again on the same address, empty, with a
// fan-out in flight (each node takes 300 ms). The loaded gateways end
// sessions until none holds more than 1.1 times the mean (ShedOptions'
// default trigger), their nodes reconnect (here to the next gateway, as
// bc-sim's re-homing does), every command of the fan-out settles exactly
// once, and a fan-out afterwards reaches every node.
func TestFleet_GatewaysShedSessionsUntilTheLoadIsEven(t *testing.T) {
	t.Parallel()
	pool := storetest.DBConfig(t, func(c *pgxpool.Config) { c.MaxConns = 24 })
	reg, err := kinds.NewRegistry(sim.Kind)
	require.NoError(t, err)
	q := queue.New(reg, hclog.NewNullLogger())
	ca, err := pki.NewCA("sim-test")
	require.NoError(t, err)
	const every = 200 * time.Millisecond
	gws := make([]*gateway.Gateway, 3)
	kills := make([]func(), 3)
	addrs := make([]string, 3)
	start := func(i int, listen string) {
		ctx, cancel := context.WithCancel(context.Background())
		gw := gateway.New(pool, q, hclog.NewNullLogger(), gateway.Options{Shed: gateway.ShedOptions{Every: every, Least: 5}})
		done := make(chan struct{})
		go func() { defer close(done); gw.Run(ctx) }()
		addr, stop, err := sim.ServeOn(gw, ca, listen)
		require.NoError(t, err)
		var once bool
		kill := func() {
			if !once {
				once = true
				stop()
				cancel()
				<-done
			}
		}
		t.Cleanup(kill)
		gws[i], kills[i], addrs[i] = gw, kill, addr
	}
	for i := range 3 {
		start(i, "127.0.0.1:0")
	}

	const n = 300
	ctx := context.Background()
	tenantID, nodeIDs, err := sim.Provision(ctx, pool, q, n)
	require.NoError(t, err)
	certs, err := sim.IssueCerts(ca, nodeIDs)
	require.NoError(t, err)
	f, err := sim.StartFleet(ctx, sim.FleetConfig{Addrs: addrs, Rehome: true, RehomeDelay: 50 * time.Millisecond,
		RootCAs: ca.Pool(), NodeIDs: nodeIDs, Certs: certs})
	require.NoError(t, err)
	t.Cleanup(f.Close)
	held := func() []int { return []int{gws[0].Sessions(), gws[1].Sessions(), gws[2].Sessions()} }
	// Spread as a round-robin load balancer would, though a gateway may
	// have shed a few while the fleet connected (its count ahead of the
	// others' for two rounds).
	testutil.WaitFor(t, time.Minute, "every node on a gateway, none above 1.1 times the mean", func() bool {
		h := held()
		return h[0]+h[1]+h[2] == n && slices.Max(h) <= n/3*11/10
	})

	kills[0]()
	testutil.WaitFor(t, time.Minute, "every node on the two gateways left, evened out between them", func() bool {
		h := held()
		return h[1]+h[2] == n && max(h[1], h[2]) <= n/2*11/10
	})
	t.Logf("after the first gateway died: %v sessions; shed by the two others: %d, %d", held(), gws[1].Shed(), gws[2].Shed())

	// The first gateway again, empty, while a fan-out is in flight.
	for _, d := range f.Daemons {
		d.Script = func(*agentv1.Command) fakedaemon.Action {
			return fakedaemon.Action{Kind: fakedaemon.Succeed, Delay: 300 * time.Millisecond}
		}
	}
	target := sim.Target{Pool: pool, Queue: q, TenantID: tenantID, Fleet: f}
	fanout := make(chan error, 1)
	go func() {
		_, err := sim.Fanout(ctx, target, time.Minute)
		fanout <- err
	}()
	testutil.WaitFor(t, 30*time.Second, "the fan-out to reach nodes", func() bool {
		for _, d := range f.Daemons {
			if len(d.Received()) > 0 {
				return true
			}
		}
		return false
	})
	restarted := time.Now()
	shedBefore := gws[1].Shed() + gws[2].Shed()
	start(0, addrs[0])
	testutil.WaitFor(t, time.Minute, "the three gateways to hold at most 1.1 times the mean each", func() bool {
		h := held()
		return h[0]+h[1]+h[2] == n && slices.Max(h) <= n/3*11/10
	})
	even := time.Since(restarted)
	t.Logf("after the first gateway started again: %v sessions within %s; shed by each: %d, %d, %d", held(), even.Round(time.Millisecond), gws[0].Shed(), gws[1].Shed(), gws[2].Shed())
	// The counts a gateway acts on are up to a round old, so the
	// returned gateway may briefly overshoot the mean and shed some back;
	// the loaded ones do the shedding.
	require.LessOrEqual(t, 4*gws[0].Shed(), gws[1].Shed()+gws[2].Shed()-shedBefore, "the returned gateway sheds far less than the loaded ones did since it returned")
	if err := <-fanout; err != nil {
		t.Logf("the fan-out's own wait: %v", err)
	}

	// Every command of the fan-out in flight settled exactly once.
	requireSettledOnce(t, pool, tenantID, n)

	// Every node takes new commands where it now is.
	for _, d := range f.Daemons {
		d.Script = nil
	}
	again, err := sim.Fanout(ctx, target, time.Minute)
	require.NoError(t, err)
	require.Equal(t, n, again.Succeeded)
}

// requireSettledOnce waits for every command of the tenant to settle and
// asserts that all n succeeded, each with exactly one command.settled
// event: nothing lost, nothing settled twice.
func requireSettledOnce(t *testing.T, pool *pgxpool.Pool, tenantID string, n int) {
	t.Helper()
	ctx := context.Background()
	states := map[string]int{}
	testutil.WaitFor(t, time.Minute, "every command of the fan-out in flight to settle", func() bool {
		rows, err := pool.Query(ctx, `SELECT state, count(*) FROM commands WHERE tenant_id = $1 GROUP BY state`, tenantID)
		require.NoError(t, err)
		defer rows.Close()
		clear(states)
		for rows.Next() {
			var st string
			var c int
			require.NoError(t, rows.Scan(&st, &c))
			states[st] = c
		}
		return states["pending"]+states["dispatched"]+states["acked"]+states["running"] == 0
	})
	require.Equal(t, map[string]int{"succeeded": n}, states, "every command of the fan-out in flight settled succeeded")

	// Exactly once: one command.settled each.
	var settled, twice int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE n <> 1) FROM (
		SELECT c.id, (SELECT count(*) FROM outbox o WHERE o.topic = 'command.settled' AND o.payload->>'commandId' = c.id) AS n
		FROM commands c WHERE c.tenant_id = $1) s`, tenantID).Scan(&settled, &twice))
	require.Equal(t, n, settled)
	require.Zero(t, twice, "no command settled twice")
}
