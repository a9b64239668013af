package sim_test

import (
	"context"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/controlplane/commands/kinds"
	"github.com/better-compute/commands/controlplane/commands/queue"
	"github.com/better-compute/commands/controlplane/front/gateway"
	"github.com/better-compute/commands/controlplane/internal/storetest"
	"github.com/better-compute/commands/controlplane/testing/sim"
	"github.com/better-compute/commands/controlplane/trust/pki"
)

// controlPlane is a real gateway on real PostgreSQL, served over mTLS.
type controlPlane struct {
	pool *pgxpool.Pool
	q    *queue.Queue
	ca   *pki.CA
	gw   *gateway.Gateway
	addr string
}

func startControlPlane(t *testing.T) *controlPlane {
	t.Helper()
	pool := storetest.DBConfig(t, func(c *pgxpool.Config) { c.MaxConns = 16 })
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	reg, err := kinds.NewRegistry(sim.Kind)
	require.NoError(t, err)
	q := queue.New(reg, hclog.NewNullLogger())
	ca, err := pki.NewCA("sim-test")
	require.NoError(t, err)
	gw := gateway.New(pool, q, hclog.NewNullLogger(), gateway.Options{})
	go gw.Run(ctx)
	addr, stop, err := sim.Serve(gw, ca)
	require.NoError(t, err)
	t.Cleanup(stop)
	return &controlPlane{pool: pool, q: q, ca: ca, gw: gw, addr: addr}
}

func (cp *controlPlane) fleet(t *testing.T, n int) (sim.Target, *sim.Fleet) {
	t.Helper()
	ctx := context.Background()
	tenantID, nodeIDs, err := sim.Provision(ctx, cp.pool, cp.q, n)
	require.NoError(t, err)
	require.Len(t, nodeIDs, n)
	certs, err := sim.IssueCerts(cp.ca, nodeIDs)
	require.NoError(t, err)
	f, err := sim.StartFleet(ctx, sim.FleetConfig{Addr: cp.addr, RootCAs: cp.ca.Pool(), NodeIDs: nodeIDs, Certs: certs})
	require.NoError(t, err)
	t.Cleanup(f.Close)
	return sim.Target{Pool: cp.pool, Queue: cp.q, TenantID: tenantID, Fleet: f}, f
}

// StartFleet returns once every node holds a session: the gateway counts
// them all.
func TestFleet_EverySessionOpens(t *testing.T) {
	t.Parallel()
	cp := startControlPlane(t)
	_, f := cp.fleet(t, 25)
	require.Len(t, f.Daemons, 25)
	require.Equal(t, 25, cp.gw.Sessions())
	for _, d := range f.Daemons {
		require.NotNil(t, d.Welcome(), "node %s has a Welcome", d.NodeID)
	}
	require.Positive(t, f.ConnectTime)
}

// The steady workload measures one latency per command, from commit to
// receipt, and every command reaches its node.
func TestSteady_MeasuresEveryCommand(t *testing.T) {
	t.Parallel()
	cp := startControlPlane(t)
	target, f := cp.fleet(t, 10)
	// The marks bracket the run (BenchmarkSessions samples between them).
	var marks []string
	target.Mark = func(name string) { marks = append(marks, name) }
	res, err := sim.Steady(context.Background(), target, sim.SteadyOptions{Commands: 30, Concurrency: 3})
	require.NoError(t, err)
	require.Equal(t, []string{"steady-started", "steady-finished"}, marks)
	require.Equal(t, 30, res.Dispatch.Count)
	require.Zero(t, res.Lost)
	require.Positive(t, res.Dispatch.P50)
	require.LessOrEqual(t, res.Dispatch.P50, res.Dispatch.P99)
	require.LessOrEqual(t, res.Dispatch.P99, res.Dispatch.Max)
	total := 0
	for _, d := range f.Daemons {
		total += len(d.Received())
	}
	require.Equal(t, 30, total, "each command was delivered once")
	require.Zero(t, f.Ended())
}

// A fan-out reaches every node and settles: every command ends succeeded.
func TestFanout_EveryNodeSettles(t *testing.T) {
	t.Parallel()
	cp := startControlPlane(t)
	target, f := cp.fleet(t, 20)
	var marks []string
	target.Mark = func(name string) { marks = append(marks, name) }
	res, err := sim.Fanout(context.Background(), target, time.Minute)
	require.NoError(t, err)
	require.Equal(t, []string{"fanout-committed", "fanout-settled"}, marks)
	require.Equal(t, 20, res.Nodes)
	require.Equal(t, 20, res.Succeeded)
	require.Equal(t, 20, res.Receipt.Count)
	require.LessOrEqual(t, res.Received, res.Settled, "a command settles after its node receives it")
	for _, d := range f.Daemons {
		require.Len(t, d.Received(), 1)
		require.Equal(t, 1, d.Runs(d.Received()[0].GetId()))
	}
}

func TestSummarise(t *testing.T) {
	require.Equal(t, sim.Latency{}, sim.Summarise(nil))
	var d []time.Duration
	for i := 100; i >= 1; i-- {
		d = append(d, time.Duration(i)*time.Millisecond)
	}
	l := sim.Summarise(d)
	require.Equal(t, 100, l.Count)
	require.Equal(t, 51*time.Millisecond, l.P50)
	require.Equal(t, 100*time.Millisecond, l.P99)
	require.Equal(t, 100*time.Millisecond, l.Max)
	require.Equal(t, 100*time.Millisecond, d[0], "the input is not reordered")
}
