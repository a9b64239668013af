package main_test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/controlplane/commands/kinds"
	"github.com/better-compute/commands/controlplane/commands/queue"
	"github.com/better-compute/commands/controlplane/front/gateway"
	"github.com/better-compute/commands/controlplane/internal/storetest"
	"github.com/better-compute/commands/controlplane/testing/sim"
	"github.com/better-compute/commands/controlplane/trust/pki"
	"github.com/better-compute/commands/internal/testutil"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testutil.CleanupBuilds()
	os.Exit(code)
}

// gatewayOn starts a real gateway on a fresh database, served over mTLS with
// a node CA kept in a directory, as bc-server keeps it.
func gatewayOn(t *testing.T) (addr, caDir, dbName string) {
	t.Helper()
	pool := storetest.DBConfig(t, func(c *pgxpool.Config) { c.MaxConns = 8 })
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	reg, err := kinds.NewRegistry(sim.Kind)
	require.NoError(t, err)
	gw := gateway.New(pool, queue.New(reg, hclog.NewNullLogger()), hclog.NewNullLogger(), gateway.Options{})
	go gw.Run(ctx)
	caDir = t.TempDir()
	ca, err := pki.LoadOrCreateCA(caDir)
	require.NoError(t, err)
	addr, stop, err := sim.Serve(gw, ca)
	require.NoError(t, err)
	t.Cleanup(stop)
	return addr, caDir, pool.Config().ConnConfig.Database
}

func bcSim(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := exec.Command(testutil.BuildBinary(t, "./controlplane/cmd/bc-sim"), args...)
	var o, e strings.Builder
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		return o.String(), e.String(), ee.ExitCode()
	}
	require.NoError(t, err)
	return o.String(), e.String(), 0
}

// `bc-sim --gateway ADDR --ca ... --nodes N --database-url ... --workload
// both --json` runs the steady workload then a fan-out and prints one JSON
// report with what it measured.
func TestBcSim_BothWorkloadsJSON(t *testing.T) {
	t.Parallel()
	addr, caDir, db := gatewayOn(t)
	out, errOut, code := bcSim(t, "--gateway", addr, "--ca", caDir, "--nodes", "8", "--database-url", "dbname="+db,
		"--workload", "both", "--commands", "16", "--concurrency", "2", "--json")
	require.Zero(t, code, errOut)
	var rep struct {
		Workload string `json:"workload"`
		Nodes    int    `json:"nodes"`
		Steady   struct {
			Dispatch sim.Latency `json:"dispatch"`
			Lost     int         `json:"lost"`
		} `json:"steady"`
		Fanouts       []sim.FanoutResult `json:"fanouts"`
		SessionsEnded int                `json:"sessionsEnded"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &rep), out)
	require.Equal(t, "both", rep.Workload)
	require.Equal(t, 8, rep.Nodes)
	require.Equal(t, 16, rep.Steady.Dispatch.Count)
	require.Zero(t, rep.Steady.Lost)
	require.Positive(t, rep.Steady.Dispatch.P50)
	require.Len(t, rep.Fanouts, 1)
	require.Equal(t, 8, rep.Fanouts[0].Succeeded)
	require.Zero(t, rep.SessionsEnded)
}

// The readable output names each figure.
func TestBcSim_ReadableFanout(t *testing.T) {
	t.Parallel()
	addr, caDir, db := gatewayOn(t)
	out, errOut, code := bcSim(t, "--gateway", addr, "--ca", caDir, "--nodes", "5", "--database-url", "dbname="+db,
		"--workload", "fanout", "--fanouts", "2")
	require.Zero(t, code, errOut)
	require.Contains(t, out, "nodes           5")
	require.Contains(t, out, "fan-out 1")
	require.Contains(t, out, "fan-out 2")
	require.Contains(t, out, "5 nodes: enqueued in")
	require.Contains(t, out, "(5 succeeded)")
}

// Flags are checked before anything connects.
func TestBcSim_FlagErrors(t *testing.T) {
	t.Parallel()
	caDir := t.TempDir()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--ca", caDir}, "--gateway is required"},
		{[]string{"--gateway", "127.0.0.1:1"}, "--ca is required"},
		{[]string{"--gateway", "127.0.0.1:1", "--ca", caDir, "--workload", "storm"}, `--workload "storm"`},
		{[]string{"--gateway", "127.0.0.1:1", "--ca", caDir, "--workload", "steady"}, "needs --database-url"},
		{[]string{"--gateway", "127.0.0.1:1", "--ca", caDir, "--workload", "steady", "--database-url", "x"}, "needs --commands or --duration"},
		{[]string{"--gateway", "127.0.0.1:1", "--ca", caDir, "--nodes", "0"}, "--nodes must be positive"},
		{[]string{"--gateway", "127.0.0.1:1", "--ca", caDir, "--workload", "idle"}, "the node CA's key is needed"},
	} {
		_, errOut, code := bcSim(t, tc.args...)
		require.NotZero(t, code, tc.args)
		require.Contains(t, errOut, tc.want, tc.args)
	}
}
