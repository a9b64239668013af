package gateway_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"sort"
	"strconv"
	"sync"
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
	"github.com/better-compute/commands/internal/testutil"
)

// simReport is the part of bc-sim's --json report the benchmark reads.
type simReport struct {
	Nodes         int                `json:"nodes"`
	ConnectNs     time.Duration      `json:"connectNs"`
	SessionsEnded int                `json:"sessionsEnded"`
	Steady        *sim.SteadyResult  `json:"steady"`
	Fanouts       []sim.FanoutResult `json:"fanouts"`
}

// sessionFigures are one fleet size's measurements, each beside its floor.
type sessionFigures struct {
	rtt                  sim.Latency // bare gRPC round trip on loopback
	dispatch             sim.Latency // commit to node receipt
	lost                 int
	fanout               sim.FanoutResult
	firstFanout          time.Duration // the first fan-out's settle time
	fanoutFloor          time.Duration // N bare round trips, 64 at a time
	fanoutFloorCPU       time.Duration // this process's CPU over them, client and server both
	gwBytes, bareBytes   float64       // heap+stack per idle session
	gwHeap, bareHeap     float64       // heap alone per idle session
	idleCPU, idleQPS     float64       // gateway CPU share and database transactions/s with every session idle
	fanoutCPU            fanoutCPU     // CPU each process spent in the fan-out's window
	schedLate            sim.Latency   // how late a 2 ms sleep in this process woke over the steady window
	connect, bareConnect time.Duration
}

// defaultFanouts is how many fan-outs a fleet size runs; the median is
// reported, and the first beside it. The first few after the fleet connects
// also pay for the gateway's heap growing to its first collection target:
// pages faulted in fresh, 30,000-50,000 minor faults a fan-out at 10,000
// nodes, against about 300 once collections run (at GOGC=100 from the
// fifth fan-out on; see the operator guide's "Memory and garbage
// collection"). Each is logged with its faults, and BC_SIM_FANOUTS runs
// more.
const defaultFanouts = 5

var (
	figuresLock sync.Mutex
	figures     = map[int]*sessionFigures{}
)

// BenchmarkSessions runs the fleet simulator (bc-sim, a real subprocess
// holding one FakeDaemon session per node over mTLS) against a gateway in
// this process on real PostgreSQL, for 1,000, 10,000 and 30,000 nodes. It reports:
//
//   - dispatch latency from commit to the node receiving the command (p50,
//     p99; a few hundred commands, one at a time to random nodes), beside a
//     bare gRPC round trip on loopback over the same mTLS, and beside how
//     late a 2 ms sleep in the gateway process wakes over the same window
//     (sched-late: on a machine whose cores the three processes share, a
//     dispatch's tail cannot be shorter than the scheduling delay);
//   - the time for one command fanned out to every node to settle (all
//     terminal in the database; the median of five fan-outs run one after
//     another, each logged, and the first), beside N bare round trips 64 at a time,
//     and the CPU the gateway, PostgreSQL and bc-sim each spent over it
//     (the gateway's and PostgreSQL's also per settled node, beside the
//     CPU one bare round trip of the floor costs this process, client and
//     server together: cpu-gateway-ns/node, cpu-postgres-ns/node,
//     floor-cpu-ns/node, ratio-cpu)
//     (with the share of the machine's cores they kept busy: near 100%,
//     the fan-out is bound by this machine's CPU, and only spending less
//     of it a node makes it faster);
//   - memory per idle session (this process's HeapInuse+StackInuse delta
//     over N sessions), beside an idle Bare session (Hello, Welcome, nothing
//     else) over the same mTLS;
//   - with every session idle: the gateway's CPU share and the database's
//     transactions per second (the per-session poll).
//
// The spec's targets: "p50 under 10 ms and p99 under 100 ms at 1,000 nodes;
// a fan-out to 5,000 nodes settled in under 10 s"; issue 17's: at 10,000
// nodes a fan-out settled in under 3 s and dispatch p99 under 5 ms, and
// 30,000 idle sessions at most 1.15 times the bare session's memory and
// under 20% of one core. It is heavy: it runs only
// with -bench, skips with -short, measures once per fleet size however large
// b.N is, and BC_SIM_NODES (comma-free single count) replaces the sizes.
// BC_SIM_FANOUTS replaces the number of fan-outs (five; with an even
// number the reported median is the slower of the middle two).
// BC_BENCH_CPUPROFILE=dir writes CPU profiles of the workload alone (the
// gateway, this process, and bc-sim) and of the gateway's idle window, and
// the gateway's allocation profiles before and after the workload, for go
// tool pprof. BC_BENCH_GATEWAY_LOG=path writes the gateway's log (info and
// above) there.
func BenchmarkSessions(b *testing.B) {
	if testing.Short() {
		b.Skip("heavy: thousands of sessions")
	}
	// The sizes: dispatch and fan-out at 10,000 nodes, idle
	// sessions at 30,000 (which needs an open-file limit above 30,000 in
	// this process and in bc-sim's; it skips, saying so, where the hard
	// limit is lower: run BC_SIM_NODES=19000 there).
	sizes := []int{1000, 10000, 30000}
	if v := os.Getenv("BC_SIM_NODES"); v != "" {
		n, err := strconv.Atoi(v)
		require.NoError(b, err, "BC_SIM_NODES")
		sizes = []int{n}
	}
	for _, n := range sizes {
		b.Run(fmt.Sprintf("nodes=%d", n), func(b *testing.B) {
			f := measureSessions(b, n)
			b.ReportMetric(0, "ns/op")
			b.ReportMetric(float64(f.dispatch.P50), "p50-ns")
			b.ReportMetric(float64(f.dispatch.P99), "p99-ns")
			b.ReportMetric(float64(f.rtt.P50), "floor-p50-ns")
			b.ReportMetric(float64(f.rtt.P99), "floor-p99-ns")
			b.ReportMetric(float64(f.dispatch.P50)/float64(f.rtt.P50), "ratio-p50")
			b.ReportMetric(float64(f.dispatch.P99)/float64(f.rtt.P99), "ratio-p99")
			b.ReportMetric(float64(f.fanout.Settled), "fanout-settle-ns")
			b.ReportMetric(float64(f.fanout.Received), "fanout-received-ns")
			b.ReportMetric(float64(f.firstFanout), "fanout-first-settle-ns")
			b.ReportMetric(float64(f.fanoutFloor), "floor-fanout-ns")
			b.ReportMetric(float64(f.fanout.Settled)/float64(f.fanoutFloor), "ratio-fanout")
			b.ReportMetric(f.gwBytes, "B/session")
			b.ReportMetric(f.gwHeap, "heap-B/session")
			b.ReportMetric(f.bareBytes, "floor-B/session")
			b.ReportMetric(f.gwBytes/f.bareBytes, "ratio-mem")
			b.ReportMetric(f.idleCPU, "idle-cpu-%")
			b.ReportMetric(f.idleQPS, "idle-db-tx/s")
			b.ReportMetric(float64(f.fanoutCPU.gateway), "fanout-cpu-gateway-ns")
			b.ReportMetric(float64(f.fanoutCPU.postgres), "fanout-cpu-postgres-ns")
			b.ReportMetric(float64(f.fanoutCPU.sim), "fanout-cpu-sim-ns")
			// Issue 34: CPU per settled node, the gateway's and
			// PostgreSQL's, beside the floor: what one bare mTLS round
			// trip costs client and server together (a command needs at
			// least one: its dispatch and its result).
			b.ReportMetric(float64(f.fanoutCPU.gateway)/float64(n), "cpu-gateway-ns/node")
			b.ReportMetric(float64(f.fanoutCPU.postgres)/float64(n), "cpu-postgres-ns/node")
			b.ReportMetric(float64(f.fanoutFloorCPU)/float64(n), "floor-cpu-ns/node")
			b.ReportMetric(float64(f.fanoutCPU.gateway+f.fanoutCPU.postgres)/float64(f.fanoutFloorCPU), "ratio-cpu")
			b.ReportMetric(float64(f.schedLate.P99), "sched-late-p99-ns")
		})
	}
}

// measureSessions measures a fleet of n once per process: the benchmark
// framework calls a benchmark with b.N = 1 before the real run, and a fleet
// of thousands is far too slow to build twice.
func measureSessions(b *testing.B, n int) *sessionFigures {
	figuresLock.Lock()
	defer figuresLock.Unlock()
	if f, ok := figures[n]; ok {
		return f
	}
	if lim, err := sim.RaiseFileLimit(); err == nil && lim < uint64(n)+256 {
		b.Skipf("open-file limit %d is too low for %d sessions", lim, n)
	}
	bin := testutil.BuildBinary(b, "./controlplane/cmd/bc-sim")
	caDir := b.TempDir()
	ca, err := pki.LoadOrCreateCA(caDir)
	require.NoError(b, err)
	f := &sessionFigures{}
	// BC_SIM_FANOUTS replaces the number of fan-outs (to watch a gateway
	// that has served many).
	fanouts := defaultFanouts
	if v := os.Getenv("BC_SIM_FANOUTS"); v != "" {
		fanouts, err = strconv.Atoi(v)
		require.NoError(b, err, "BC_SIM_FANOUTS")
		require.Positive(b, fanouts, "BC_SIM_FANOUTS")
	}
	f.rtt, f.fanoutFloor, f.fanoutFloorCPU = bareRoundTrips(b, ca, n)

	// Floor: N idle Bare sessions over the same mTLS.
	bare := &sim.Bare{}
	addr, stop, err := sim.Serve(bare, ca)
	require.NoError(b, err)
	rep, mem := runSim(b, bin, n, bare.Sessions, nil, nil, "--gateway", addr, "--ca", caDir, "--workload", "idle")
	stop()
	f.bareBytes, f.bareHeap, f.bareConnect = mem.total, mem.heap, rep.ConnectNs

	// The gateway on real PostgreSQL, its pool sized for thousands of
	// sessions sharing few connections (max_connections=300 in with-postgres).
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	reg, err := kinds.NewRegistry(sim.Kind)
	require.NoError(b, err)
	q := queue.New(reg, hclog.NewNullLogger())
	pool := storetest.DBConfig(b, func(c *pgxpool.Config) {
		c.MaxConns = 32
		// As bc-server's pool: a new connection runs the gateway's
		// statements once before it serves a dispatch.
		c.AfterConnect = queue.WarmConn
	})
	// BC_BENCH_GATEWAY_LOG=path writes the gateway's log there (info and
	// above): why sessions ended, outages.
	gwLog := hclog.NewNullLogger()
	if path := os.Getenv("BC_BENCH_GATEWAY_LOG"); path != "" {
		lf, err := os.Create(path)
		require.NoError(b, err)
		defer lf.Close()
		gwLog = hclog.New(&hclog.LoggerOptions{Name: "gateway", Level: hclog.Info, Output: lf})
	}
	gw := gateway.New(pool, q, gwLog, gateway.Options{})
	go gw.Run(ctx)
	addr, stop, err = sim.Serve(gw, ca)
	require.NoError(b, err)
	defer stop()
	idle := func() {
		// BC_BENCH_CPUPROFILE=dir profiles the idle window too, as
		// gateway-idle-N.pprof: what holding N quiet sessions costs.
		if dir := os.Getenv("BC_BENCH_CPUPROFILE"); dir != "" {
			pf, err := os.Create(filepath.Join(dir, fmt.Sprintf("gateway-idle-%d.pprof", n)))
			require.NoError(b, err)
			require.NoError(b, pprof.StartCPUProfile(pf))
			defer func() { pprof.StopCPUProfile(); _ = pf.Close() }()
		}
		f.idleCPU, f.idleQPS = idleLoad(b, pool, 5*time.Second)
	}
	// What the gateway, bc-sim and PostgreSQL each spend over each fan-out,
	// from snapshots taken as bc-sim marks its commit and its settling
	// (read once bc-sim exited: its stderr is copied to the end by then).
	var atCommit, atSettle []cpuSnapshot
	// And how late this process's timers fire over the steady workload:
	// dispatch latency's tail on a shared machine is bounded below by it.
	var late *lateSampler
	mark := func(name string, simPID int) {
		switch name {
		case "steady-started":
			late = startLateSampler(2 * time.Millisecond)
		case "steady-finished":
			if late != nil {
				f.schedLate = late.finish()
			}
		case "fanout-committed":
			atCommit = append(atCommit, takeCPUSnapshot(simPID))
		case "fanout-settled":
			atSettle = append(atSettle, takeCPUSnapshot(simPID))
		}
	}
	rep, mem = runSim(b, bin, n, gw.Sessions, idle, mark, "--marks", "--gateway", addr, "--ca", caDir, "--workload", "both",
		"--database-url", "dbname="+pool.Config().ConnConfig.Database, "--commands", "300", "--timeout", "2m",
		"--fanouts", strconv.Itoa(fanouts))
	f.gwBytes, f.gwHeap, f.connect = mem.total, mem.heap, rep.ConnectNs
	require.NotNil(b, rep.Steady)
	require.Len(b, rep.Fanouts, fanouts)
	require.Len(b, atSettle, fanouts, "bc-sim marked each fan-out's settling")
	require.Len(b, atCommit, fanouts, "bc-sim marked each fan-out's commit")
	f.dispatch, f.lost = rep.Steady.Dispatch, rep.Steady.Lost
	// The median of the fan-outs by settle time, with its own CPU: on a
	// shared machine one fan-out's time varies by a fifth from run to run.
	// Each is logged, the first (on a fleet idle until then) among them.
	order := make([]int, fanouts)
	for i := range order {
		order[i] = i
		fo := rep.Fanouts[i]
		require.Equal(b, n, fo.Succeeded, "every command of fan-out %d succeeded", i+1)
		cpu := atCommit[i].spentUntil(atSettle[i])
		b.Logf("nodes=%d: fan-out %d of %d: received p50 %s max %s, settled %s; CPU gateway %s (system %s, %d minor page faults), postgres %s, bc-sim %s",
			n, i+1, fanouts, fo.Receipt.P50.Round(time.Millisecond), fo.Received.Round(time.Millisecond), fo.Settled.Round(time.Millisecond),
			cpu.gateway.Round(10*time.Millisecond), cpu.gatewaySys.Round(10*time.Millisecond), cpu.gatewayFaults,
			cpu.postgres.Round(10*time.Millisecond), cpu.sim.Round(10*time.Millisecond))
	}
	sort.Slice(order, func(i, j int) bool { return rep.Fanouts[order[i]].Settled < rep.Fanouts[order[j]].Settled })
	med := order[fanouts/2]
	f.firstFanout = rep.Fanouts[0].Settled
	f.fanout, f.fanoutCPU = rep.Fanouts[med], atCommit[med].spentUntil(atSettle[med])
	// The share of the machine's cores the three kept busy over the
	// fan-out: near 1, the fan-out is bound by this machine's CPU, and its
	// time falls only with the CPU it costs.
	busy := f.fanoutCPU.total().Seconds() / (f.fanout.Settled.Seconds() * float64(runtime.NumCPU()))
	require.Zero(b, f.lost, "every command reached its node")
	b.Logf("nodes=%d: sessions open in %s (bare %s); dispatch p50 %s p99 %s max %s (floor rtt p50 %s p99 %s; meanwhile a 2 ms sleep in the gateway process woke late by p50 %s p99 %s max %s); fan-out (median of %d) received p50 %s max %s, settled %s (floor %s); %.1f KiB/session (heap %.1f KiB; bare %.1f KiB); idle: gateway CPU %.0f%%, %.0f db tx/s; %d sessions ended; fan-out CPU: gateway %s, postgres %s, bc-sim %s (%.0f µs a node in all; %.0f%% of %d cores busy over its window); a settled node: gateway %.0f µs + postgres %.0f µs beside a bare round trip's %.0f µs (ratio %.1f)",
		n, f.connect.Round(time.Millisecond), f.bareConnect.Round(time.Millisecond), f.dispatch.P50, f.dispatch.P99, f.dispatch.Max, f.rtt.P50, f.rtt.P99,
		f.schedLate.P50, f.schedLate.P99, f.schedLate.Max,
		fanouts, f.fanout.Receipt.P50.Round(time.Millisecond), f.fanout.Received.Round(time.Millisecond), f.fanout.Settled.Round(time.Millisecond), f.fanoutFloor.Round(time.Millisecond),
		f.gwBytes/1024, f.gwHeap/1024, f.bareBytes/1024, f.idleCPU, f.idleQPS, rep.SessionsEnded,
		f.fanoutCPU.gateway.Round(10*time.Millisecond), f.fanoutCPU.postgres.Round(10*time.Millisecond), f.fanoutCPU.sim.Round(10*time.Millisecond),
		float64(f.fanoutCPU.total().Microseconds())/float64(n), 100*busy, runtime.NumCPU(),
		float64(f.fanoutCPU.gateway.Microseconds())/float64(n), float64(f.fanoutCPU.postgres.Microseconds())/float64(n),
		float64(f.fanoutFloorCPU.Microseconds())/float64(n), float64(f.fanoutCPU.gateway+f.fanoutCPU.postgres)/float64(f.fanoutFloorCPU))
	figures[n] = f
	return f
}
