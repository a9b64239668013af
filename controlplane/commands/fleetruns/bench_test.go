package fleetruns_test

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime/pprof"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/controlplane/commands/fleetruns"
	"github.com/better-compute/commands/controlplane/commands/queue"
	"github.com/better-compute/commands/controlplane/internal/ids"
	"github.com/better-compute/commands/controlplane/testing/sim"
	apiv1 "github.com/better-compute/commands/proto/bc/api/v1"
)

// defaultFleetNodes is issue 30's fleet: "a run over 10,000 simulated
// nodes (bc-sim)". BC_SIM_NODES replaces it.
const defaultFleetNodes = 10000

// defaultFleetRounds is how many times each workload runs; the median is
// reported. BC_FLEET_ROUNDS replaces it.
const defaultFleetRounds = 3

// createReps is how many runs the creation figure is the median of.
const createReps = 3

// fleetFigures are one fleet size's measurements, each beside its floor.
type fleetFigures struct {
	create, createFloor time.Duration // fleetRuns.create over n targets; a bare insert of the run and its n targets
	run100, floor100    time.Duration // a run at maxConcurrency 100%, create to succeeded; one fan-out to every node
	run10, floor10      time.Duration // a run at 10%; ten fan-outs of a tenth of the nodes, one after another
	open10, floorOpen10 int           // the most open commands sampled during each
	limit10             int           // the 10% run's concurrency limit
	createLive          time.Duration // the 100% runs' own create calls, the advancer running (median)
}

var (
	fleetLock sync.Mutex
	fleetDone = map[int]*fleetFigures{}
)

// BenchmarkFleetRuns measures issue 30's scale targets on a fleet of
// 10,000 simulated nodes (bc-sim, a real subprocess holding one session per
// node over mTLS) against the gateway, the API (real gRPC, bearer-token
// auth) and the fleet runs' advancer and settle hook, all in this process
// on real PostgreSQL, as bc-server runs them:
//
//   - a run with maxConcurrency 100%: from the fleetRuns.create call to the
//     run ended succeeded, beside a bare fan-out of the same kind to the
//     same nodes (one transaction that queues them all, until every
//     command settled; see fanout); the target is a ratio of at most 1.3;
//   - a run with maxConcurrency 10%: its time beside ten such fan-outs of a
//     tenth of the nodes one after another (target 1.3), and the open
//     commands counted every 20 ms during each: the run's most never
//     exceeds its limit (it fails the benchmark otherwise);
//   - fleetRuns.create over every node (10,000 node ids), the call's time
//     beside a bare transaction that inserts a run and its 10,000 targets
//     with unnest (target: under 2 s), timed before the advancer starts so
//     that the call alone is measured (the runs are cancelled after);
//     the 100% runs' own create calls, the advancer woken by each, are
//     reported beside them.
//
// Each workload runs BC_FLEET_ROUNDS times (three), interleaved with its
// floor, after one unmeasured fan-out (the first after the fleet connects
// pays for the gateway's heap growing); the medians are reported and each
// round is logged with the CPU the control plane, PostgreSQL and bc-sim
// spent over it. It runs only with -bench, skips with -short, and measures
// once per fleet size however large b.N is; BC_SIM_NODES replaces the
// fleet size. BC_BENCH_CPUPROFILE=dir writes a CPU profile of this process
// for each workload of each round (fleet-<workload>-<round>.pprof), and
// beside it what the database was running (see profile).
func BenchmarkFleetRuns(b *testing.B) {
	if testing.Short() {
		b.Skip("heavy: thousands of sessions")
	}
	n := defaultFleetNodes
	if v := os.Getenv("BC_SIM_NODES"); v != "" {
		var err error
		n, err = strconv.Atoi(v)
		require.NoError(b, err, "BC_SIM_NODES")
		require.GreaterOrEqual(b, n, 10, "BC_SIM_NODES: ten fan-outs of a tenth need ten nodes")
	}
	b.Run(fmt.Sprintf("nodes=%d", n), func(b *testing.B) {
		f := measureFleetRuns(b, n)
		b.ReportMetric(0, "ns/op")
		b.ReportMetric(float64(f.run100), "run100-ns")
		b.ReportMetric(float64(f.floor100), "floor-fanout-ns")
		b.ReportMetric(float64(f.run100)/float64(f.floor100), "ratio-100")
		b.ReportMetric(float64(f.run10), "run10-ns")
		b.ReportMetric(float64(f.floor10), "floor-ten-fanouts-ns")
		b.ReportMetric(float64(f.run10)/float64(f.floor10), "ratio-10")
		b.ReportMetric(float64(f.open10), "run10-open-max")
		b.ReportMetric(float64(f.limit10), "run10-open-limit")
		b.ReportMetric(float64(f.floorOpen10), "floor-ten-fanouts-open-max")
		b.ReportMetric(float64(f.create), "create-ns")
		b.ReportMetric(float64(f.createFloor), "floor-create-ns")
		b.ReportMetric(float64(f.create)/float64(f.createFloor), "ratio-create")
		b.ReportMetric(float64(f.createLive), "create-advancing-ns")
	})
}

func measureFleetRuns(b *testing.B, n int) *fleetFigures {
	fleetLock.Lock()
	defer fleetLock.Unlock()
	if f, ok := fleetDone[n]; ok {
		return f
	}
	rounds := defaultFleetRounds
	if v := os.Getenv("BC_FLEET_ROUNDS"); v != "" {
		var err error
		rounds, err = strconv.Atoi(v)
		require.NoError(b, err, "BC_FLEET_ROUNDS")
		require.Positive(b, rounds, "BC_FLEET_ROUNDS")
	}
	fb, stop := startFleetBench(b, n)
	defer stop()
	f := &fleetFigures{}

	// Creation, before the advancer runs: the call alone.
	var creates, createFloors []time.Duration
	for i := range createReps {
		createFloors = append(createFloors, fb.bareCreate(b))
		d, run := fb.create(b, "100%", fmt.Sprintf("create-%d", i))
		creates = append(creates, d)
		_, err := fb.runs.Cancel(fb.authCtx(), &apiv1.FleetRunActionRequest{TenantId: fb.tenant, RunId: run.GetId()})
		require.NoError(b, err)
	}
	f.create, f.createFloor = median(creates), median(createFloors)

	adv := fb.startAdvancer()
	fb.waitDB(b, time.Minute, 10*time.Millisecond, "the cancelled runs end", `SELECT count(*) = 0 FROM fleet_runs WHERE finished_at IS NULL`)
	require.True(b, adv.Leading(), "the advancer leads")
	fb.fanout(b, fb.nodes, "warm-")

	var run100, floor100, run10, floor10, live []time.Duration
	tenth := n / 10
	for r := range rounds {
		var line []string
		phase := func(name string, fn func() string) {
			defer fb.profile(b, name, r)()
			c0 := fb.cpuNow()
			what := fn()
			line = append(line, fmt.Sprintf("%s (%s)", what, fb.cpuNow().since(c0)))
		}
		phase("fanout", func() string {
			d := fb.fanout(b, fb.nodes, fmt.Sprintf("floor100-%d-", r))
			floor100 = append(floor100, d)
			return fmt.Sprintf("fan-out to %d settled in %s", n, d.Round(time.Millisecond))
		})
		phase("run100", func() string {
			fb.hook.take()
			d, created := fb.runToEnd(b, "100%", fmt.Sprintf("run100-%d", r))
			run100, live = append(run100, d), append(live, created)
			return fmt.Sprintf("run at 100%% succeeded in %s (created in %s; %s)", d.Round(time.Millisecond), created.Round(time.Millisecond), fb.hook.take())
		})
		phase("ten-fanouts", func() string {
			stopSampling := fb.openSampler(20 * time.Millisecond)
			t0 := time.Now()
			for i := range 10 {
				hi := (i + 1) * tenth
				if i == 9 {
					hi = n
				}
				fb.fanout(b, fb.nodes[i*tenth:hi], fmt.Sprintf("floor10-%d-%d-", r, i))
			}
			d := time.Since(t0)
			most, samples := stopSampling()
			floor10, f.floorOpen10 = append(floor10, d), max(f.floorOpen10, most)
			return fmt.Sprintf("ten fan-outs of %d settled in %s, open at most %d (%d samples)", tenth, d.Round(time.Millisecond), most, samples)
		})
		phase("run10", func() string {
			fb.hook.take()
			stopSampling := fb.openSampler(20 * time.Millisecond)
			d, created := fb.runToEnd(b, "10%", fmt.Sprintf("run10-%d", r))
			most, samples := stopSampling()
			run10, f.open10 = append(run10, d), max(f.open10, most)
			require.Positive(b, samples, "the open count was sampled")
			return fmt.Sprintf("run at 10%% succeeded in %s (created in %s; %s), open at most %d (%d samples)", d.Round(time.Millisecond), created.Round(time.Millisecond),
				fb.hook.take(), most, samples)
		})
		b.Logf("nodes=%d round %d: %s", n, r+1, strings.Join(line, "; "))
	}
	f.run100, f.floor100, f.run10, f.floor10, f.createLive = median(run100), median(floor100), median(run10), median(floor10), median(live)
	f.limit10 = (n + 9) / 10
	require.LessOrEqual(b, f.open10, f.limit10, "issue 30: at most maxConcurrency of the run's commands are open at any time")
	b.Logf("nodes=%d (medians of %d): run 100%% %s beside a fan-out's %s (ratio %.2f); run 10%% %s beside ten fan-outs' %s (ratio %.2f), open at most %d (limit %d; ten fan-outs %d); create %s beside a bare insert's %s (ratio %.1f; %s with the advancer running)",
		n, rounds, f.run100.Round(time.Millisecond), f.floor100.Round(time.Millisecond), float64(f.run100)/float64(f.floor100),
		f.run10.Round(time.Millisecond), f.floor10.Round(time.Millisecond), float64(f.run10)/float64(f.floor10), f.open10, f.limit10, f.floorOpen10,
		f.create.Round(time.Millisecond), f.createFloor.Round(time.Millisecond), float64(f.create)/float64(f.createFloor), f.createLive.Round(time.Millisecond))
	fleetDone[n] = f
	return f
}

// floorSet is how many commands the floor's fan-out queues with one
// queue.EnqueueSet: where a command costs it least. Its cost a command
// grows with the set (on two shared cores, 10,000 nodes: about 0.25 ms a
// command in sets of 100, 0.85-1.7 ms in a set of 1,000, 2-5 ms in one of
// 2,000; queueing 2,000 one at a time with Enqueue, 1.5 ms), and one set
// of 10,000 took 55 s.
const floorSet = 100

// fanout is the floor: one transaction queues a command of the run's kind
// on each node (queue.EnqueueSet, floorSet at a time), and the time runs
// from its start until every command is settled in the database.
func (fb *fleetBench) fanout(b *testing.B, nodes []string, tag string) time.Duration {
	b.Helper()
	done := fb.watch.expect(len(nodes), func(c queue.Command) bool { return strings.HasPrefix(c.IdempotencyKey, tag) })
	ps := make([]queue.EnqueueParams, len(nodes))
	t0 := time.Now()
	notAfter := t0.Add(10 * time.Minute)
	for i, id := range nodes {
		ps[i] = queue.EnqueueParams{TenantID: fb.tenant, NodeID: id, Kind: sim.Kind.Kind, IdempotencyKey: tag + id, NotAfter: notAfter,
			Requester: "bench", RequestedVia: queue.ViaAPI}
	}
	ids := make([]string, 0, len(nodes))
	require.NoError(b, pgx.BeginFunc(fb.ctx, fb.pool, func(tx pgx.Tx) error {
		for lo := 0; lo < len(ps); lo += floorSet {
			outs, err := fb.q.EnqueueSet(fb.ctx, tx, ps[lo:min(len(ps), lo+floorSet)])
			if err != nil {
				return err
			}
			for _, o := range outs {
				if o.Err != nil {
					return o.Err
				}
				ids = append(ids, o.Command.ID)
			}
		}
		return nil
	}))
	select {
	case <-done:
	case <-time.After(3 * time.Minute):
		b.Fatalf("fan-out %s: not every command settled within 3 minutes", tag)
	}
	fb.waitDB(b, time.Minute, time.Millisecond, "fan-out "+tag+" settled", `SELECT count(*) = 0 FROM commands WHERE settled_at IS NULL`)
	d := time.Since(t0)
	var ok int
	require.NoError(b, fb.pool.QueryRow(fb.ctx, `SELECT count(*) FROM commands WHERE id = ANY ($1) AND state = 'succeeded'`, ids).Scan(&ok))
	require.Equal(b, len(nodes), ok, "fan-out %s: every command succeeded", tag)
	return d
}

// create calls fleetRuns.create over every node and returns the call's
// time.
func (fb *fleetBench) create(b *testing.B, conc, key string) (time.Duration, *apiv1.FleetRun) {
	b.Helper()
	secs := int32(600)
	t0 := time.Now()
	run, err := fb.runs.Create(fb.authCtx(), &apiv1.CreateFleetRunRequest{TenantId: fb.tenant, Kind: sim.Kind.Kind,
		Targets: &apiv1.FleetRunTargets{NodeIds: fb.nodes}, MaxConcurrency: conc, MaxErrors: "0", NotAfterSeconds: &secs, IdempotencyKey: key})
	d := time.Since(t0)
	require.NoError(b, err)
	require.Equal(b, uint32(len(fb.nodes)), run.GetCounts().GetTargets(), "a target a node")
	require.Zero(b, run.GetCounts().GetRefused(), "no node refused")
	return d, run
}

// runToEnd creates a run over every node and waits for it to end: its
// time from the create call to the run ended (succeeded, checked), and
// the create call's own.
func (fb *fleetBench) runToEnd(b *testing.B, conc, key string) (total, created time.Duration) {
	b.Helper()
	n := len(fb.nodes)
	done := fb.watch.expect(n, func(c queue.Command) bool { return queue.RunIDOfKey(c.IdempotencyKey) != "" })
	t0 := time.Now()
	created, run := fb.create(b, conc, key)
	select {
	case <-done:
	case <-time.After(5 * time.Minute):
		b.Fatalf("run %s (%s): not every command settled within 5 minutes", run.GetId(), conc)
	}
	fb.waitDB(b, time.Minute, time.Millisecond, "run "+run.GetId()+" ended", `SELECT finished_at IS NOT NULL FROM fleet_runs WHERE id = $1`, run.GetId())
	total = time.Since(t0)
	got, err := fb.runs.Get(fb.authCtx(), &apiv1.GetFleetRunRequest{TenantId: fb.tenant, RunId: run.GetId()})
	require.NoError(b, err)
	require.Equal(b, fleetruns.StateSucceeded, got.GetState(), "run %s: %s", got.GetId(), got.GetStateMessage())
	require.Equal(b, uint32(n), got.GetCounts().GetSucceeded())
	return total, created
}

// bareCreate is creation's floor: one transaction that inserts a run's row
// and its targets, one per node, with unnest; the run is stored ended, so
// the advancer passes it by.
func (fb *fleetBench) bareCreate(b *testing.B) time.Duration {
	b.Helper()
	id := ids.New(ids.Run)
	t0 := time.Now()
	require.NoError(b, pgx.BeginFunc(fb.ctx, fb.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(fb.ctx, `INSERT INTO fleet_runs (id, tenant_id, kind, targets, max_concurrency, max_errors, concurrency_limit,
			error_limit, not_after_seconds, requester, requested_via, state, finished_at)
			VALUES ($1, $2, $3, '{}', '100%', '0', $4, 0, 600, 'bench', 'api', 'succeeded', now())`, id, fb.tenant, sim.Kind.Kind, len(fb.nodes)); err != nil {
			return err
		}
		_, err := tx.Exec(fb.ctx, `INSERT INTO fleet_run_targets (run_id, ordinal, node_id)
			SELECT $1, ord - 1, node FROM unnest($2::text[]) WITH ORDINALITY AS t(node, ord)`, id, fb.nodes)
		return err
	}))
	return time.Since(t0)
}

// median is the middle of d (the slower of the middle two when even).
func median(d []time.Duration) time.Duration {
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2]
}

// profile starts a CPU profile of this process for a workload's round
// when BC_BENCH_CPUPROFILE names a directory, and returns its stop. Beside
// it, fleet-<workload>-<round>.pg.txt tallies what the database's
// backends were running, sampled from pg_stat_activity every 10 ms: a
// profile of PostgreSQL's side by statement (its CPU is most of a run's).
func (fb *fleetBench) profile(b *testing.B, workload string, round int) func() {
	dir := os.Getenv("BC_BENCH_CPUPROFILE")
	if dir == "" {
		return func() {}
	}
	name := filepath.Join(dir, fmt.Sprintf("fleet-%s-%d", workload, round+1))
	f, err := os.Create(name + ".pprof")
	require.NoError(b, err)
	require.NoError(b, pprof.StartCPUProfile(f))
	stopPG := fb.activitySampler(10 * time.Millisecond)
	return func() {
		pprof.StopCPUProfile()
		_ = f.Close()
		require.NoError(b, os.WriteFile(name+".pg.txt", []byte(stopPG()), 0o644))
	}
}
