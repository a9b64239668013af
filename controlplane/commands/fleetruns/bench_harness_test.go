package fleetruns_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/better-compute/commands/controlplane/commands/fleetruns"
	"github.com/better-compute/commands/controlplane/commands/kinds"
	"github.com/better-compute/commands/controlplane/commands/queue"
	"github.com/better-compute/commands/controlplane/front/api"
	"github.com/better-compute/commands/controlplane/front/gateway"
	"github.com/better-compute/commands/controlplane/internal/storetest"
	"github.com/better-compute/commands/controlplane/testing/sim"
	"github.com/better-compute/commands/controlplane/trust/auth"
	"github.com/better-compute/commands/controlplane/trust/pki"
	"github.com/better-compute/commands/internal/testutil"
	apiv1 "github.com/better-compute/commands/proto/bc/api/v1"
)

// benchToken is the bearer token of the benchmark's API identity: every
// tenant, and compute:nodes:* and compute:runs:* on everything in it.
const benchToken = "bench-token"

// fleetBench is the control plane a fleet-run benchmark drives, as
// bc-server runs it, in this process: the gateway holding one session per
// simulated node (bc-sim, a subprocess), the API over real gRPC with
// bearer-token auth, the queue with the fleet runs' settle hook, and the
// advancer (started by startAdvancer). All share one pool, as in
// bc-server.
type fleetBench struct {
	ctx    context.Context
	pool   *pgxpool.Pool
	q      *queue.Queue
	svc    *fleetruns.Service
	runs   apiv1.FleetRunsClient
	tenant string
	nodes  []string
	watch  *settleWatch
	hook   *hookTimer
	simPID int
	// postmaster is the PID of the database server's postmaster: the CPU
	// of its children is the database's.
	postmaster int
}

// startFleetBench starts the control plane and bc-sim with n nodes, and
// returns once every session is open. stop ends bc-sim and the servers.
func startFleetBench(b *testing.B, n int) (*fleetBench, func()) {
	b.Helper()
	if lim, err := sim.RaiseFileLimit(); err == nil && lim < uint64(n)+256 {
		b.Skipf("open-file limit %d is too low for %d sessions", lim, n)
	}
	bin := testutil.BuildBinary(b, "./controlplane/cmd/bc-sim")
	caDir := b.TempDir()
	ca, err := pki.LoadOrCreateCA(caDir)
	require.NoError(b, err)
	ctx, cancel := context.WithCancel(context.Background())
	// As BenchmarkSessions' gateway: a pool sized for thousands of sessions
	// sharing few connections, each warmed as bc-server's are.
	pool := storetest.DBConfig(b, func(c *pgxpool.Config) {
		c.MaxConns = 32
		c.AfterConnect = queue.WarmConn
	})
	reg, err := kinds.NewRegistry(sim.Kind)
	require.NoError(b, err)
	q := queue.New(reg, hclog.NewNullLogger())
	svc := fleetruns.New(pool, q, fleetruns.Options{})
	hooked := &hookTimer{}
	q.AlsoOnSettle(hooked.wrap(fleetruns.SettleHook))
	watch := &settleWatch{}
	q.AlsoOnSettle(watch.hook)
	fb := &fleetBench{ctx: ctx, pool: pool, q: q, svc: svc, watch: watch, hook: hooked}
	var backend int
	require.NoError(b, pool.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&backend))
	fb.postmaster = parentPID(backend)

	gw := gateway.New(pool, q, hclog.NewNullLogger(), gateway.Options{})
	go gw.Run(ctx)
	addr, stopGW, err := sim.Serve(gw, ca)
	require.NoError(b, err)

	srv := api.New(api.Config{Pool: pool, Queue: q, Logger: hclog.NewNullLogger(), Allowlist: []string{sim.Kind.Kind}, FleetRuns: svc})
	srv.Start(ctx)
	authn, err := auth.New(&auth.Config{Identities: []auth.IdentityConfig{{Name: "bench", Tenants: []string{"*"}, Tokens: []string{benchToken},
		Grants: []auth.Grant{{Permission: "compute:nodes:*", Resource: "compute-node/*"}, {Permission: "compute:runs:*", Resource: "*"}}}}})
	require.NoError(b, err)
	g := grpc.NewServer(grpc.ChainUnaryInterceptor(authn.UnaryInterceptor()), grpc.ChainStreamInterceptor(authn.StreamInterceptor()))
	srv.Register(g)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(b, err)
	go func() { _ = g.Serve(lis) }()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(b, err)
	fb.runs = apiv1.NewFleetRunsClient(conn)

	// bc-sim provisions its tenant and nodes in the database, opens their
	// sessions, and holds them (idle) until a line on stdin.
	cmd := exec.Command(bin, "--gateway", addr, "--ca", caDir, "--workload", "idle", "--database-url", "dbname="+pool.Config().ConnConfig.Database,
		"--nodes", strconv.Itoa(n), "--wait-stdin", "--json")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	stdin, err := cmd.StdinPipe()
	require.NoError(b, err)
	require.NoError(b, cmd.Start())
	fb.simPID = cmd.Process.Pid
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	stop := func() {
		_, _ = io.WriteString(stdin, "go\n")
		select {
		case err := <-exited:
			if err != nil {
				b.Errorf("bc-sim: %v\n%s", err, stderr.String())
			}
		case <-time.After(time.Minute):
			_ = cmd.Process.Kill()
			b.Errorf("bc-sim did not exit within a minute of its line\n%s", stderr.String())
		}
		_ = conn.Close()
		g.Stop()
		stopGW()
		cancel()
	}
	deadline := time.Now().Add(5 * time.Minute)
	for gw.Sessions() < n {
		select {
		case err := <-exited:
			b.Fatalf("bc-sim exited before %d sessions were open: %v\n%s", n, err, stderr.String())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			b.Fatalf("only %d of %d sessions open after 5 minutes\n%s", gw.Sessions(), n, stderr.String())
		}
	}
	require.NoError(b, pool.QueryRow(ctx, `SELECT id FROM tenants WHERE name = 'sim'`).Scan(&fb.tenant))
	rows, err := pool.Query(ctx, `SELECT id FROM nodes WHERE tenant_id = $1 ORDER BY id`, fb.tenant)
	require.NoError(b, err)
	for rows.Next() {
		var id string
		require.NoError(b, rows.Scan(&id))
		fb.nodes = append(fb.nodes, id)
	}
	require.NoError(b, rows.Err())
	require.Len(b, fb.nodes, n)
	return fb, stop
}

// startAdvancer runs the leader-elected advancer, as bc-server does, until
// the benchmark ends.
func (fb *fleetBench) startAdvancer() *fleetruns.Advancer {
	a := fleetruns.NewAdvancer(fb.svc, fleetruns.AdvancerOptions{})
	go a.Run(fb.ctx)
	return a
}

// authCtx authenticates an API call as the benchmark's identity.
func (fb *fleetBench) authCtx() context.Context {
	return metadata.AppendToOutgoingContext(fb.ctx, "authorization", "Bearer "+benchToken)
}

// settleWatch is a settle hook that tells the benchmark when the last of
// the commands it awaits settled: it runs in each settling transaction
// (so the watch fires just before that transaction's commit; the
// benchmark then reads the database for the state it times), and costs
// the settle a lock and a comparison. One watch at a time.
type settleWatch struct {
	mu    sync.Mutex
	match func(queue.Command) bool
	left  int
	done  chan struct{}
}

// expect arms the watch for n settles of commands that match; the channel
// closes at the nth.
func (s *settleWatch) expect(n int, match func(queue.Command) bool) <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.match, s.left, s.done = match, n, make(chan struct{})
	return s.done
}

func (s *settleWatch) hook(_ context.Context, _ pgx.Tx, settled []queue.Command) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.done == nil {
		return nil
	}
	for _, c := range settled {
		if c.State.Terminal() && s.match(c) {
			s.left--
		}
	}
	if s.left <= 0 {
		close(s.done)
		s.done = nil
	}
	return nil
}

// hookTimer times the fleet runs' settle hook (SettleHook) in the
// settling transactions: how often it ran with a run's commands, and how
// long it took there.
type hookTimer struct {
	mu          sync.Mutex
	calls, cmds int
	spent       time.Duration
}

func (h *hookTimer) wrap(f queue.SettleHook) queue.SettleHook {
	return func(ctx context.Context, tx pgx.Tx, settled []queue.Command) error {
		t0 := time.Now()
		err := f(ctx, tx, settled)
		d := time.Since(t0)
		n := 0
		for _, c := range settled {
			if queue.RunIDOfKey(c.IdempotencyKey) != "" {
				n++
			}
		}
		if n > 0 {
			h.mu.Lock()
			h.calls, h.cmds, h.spent = h.calls+1, h.cmds+n, h.spent+d
			h.mu.Unlock()
		}
		return err
	}
}

// take returns what the hook did with runs' commands since the last take.
func (h *hookTimer) take() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	s := fmt.Sprintf("settle hook %s in %d calls for %d commands", h.spent.Round(time.Millisecond), h.calls, h.cmds)
	h.calls, h.cmds, h.spent = 0, 0, 0
	return s
}

// waitDB polls sql (a boolean query) every interval until it is true,
// failing the benchmark after timeout.
func (fb *fleetBench) waitDB(b *testing.B, timeout, interval time.Duration, what, sql string, args ...any) {
	b.Helper()
	deadline := time.Now().Add(timeout)
	for {
		var ok bool
		require.NoError(b, fb.pool.QueryRow(fb.ctx, sql, args...).Scan(&ok), what)
		if ok {
			return
		}
		if time.Now().After(deadline) {
			b.Fatalf("%s: not within %s", what, timeout)
		}
		time.Sleep(interval)
	}
}

// openSampler counts the open (unsettled) commands in the database every
// period until stopped, and returns the most it saw and how many samples
// it took. The benchmark's database holds only the workload being
// measured, so these are its commands.
func (fb *fleetBench) openSampler(period time.Duration) (stop func() (most, samples int)) {
	done := make(chan struct{})
	var (
		wg     sync.WaitGroup
		most   int
		counts int
	)
	wg.Go(func() {
		t := time.NewTicker(period)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
			}
			var n int
			if err := fb.pool.QueryRow(fb.ctx, `SELECT count(*) FROM commands WHERE settled_at IS NULL`).Scan(&n); err != nil {
				continue
			}
			most, counts = max(most, n), counts+1
		}
	})
	return func() (int, int) {
		close(done)
		wg.Wait()
		return most, counts
	}
}

// cpuTimes is the CPU time (user+system) spent so far by this process (the
// gateway, the API and the advancer), by bc-sim, and by the children of
// this benchmark's database server (its backends and background workers;
// not other clusters on the machine). Two of them, taken at a phase's
// start and end, say where its time went.
type cpuTimes struct{ self, sim, db time.Duration }

func (fb *fleetBench) cpuNow() cpuTimes {
	var c cpuTimes
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		c.self = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	c.sim, _ = procCPU(fb.simPID)
	names, _ := os.ReadDir("/proc")
	for _, e := range names {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || parentPID(pid) != fb.postmaster {
			continue
		}
		cpu, _ := procCPU(pid)
		c.db += cpu
	}
	return c
}

func (c cpuTimes) since(a cpuTimes) cpuTimes {
	return cpuTimes{self: c.self - a.self, sim: c.sim - a.sim, db: c.db - a.db}
}

func (c cpuTimes) String() string {
	r := func(d time.Duration) time.Duration { return d.Round(10 * time.Millisecond) }
	return fmt.Sprintf("cpu control plane %s, postgres %s, bc-sim %s", r(c.self), r(c.db), r(c.sim))
}

// statFields are the fields of /proc/<pid>/stat after the command name.
func statFields(pid int) []string {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return nil
	}
	line := string(b)
	end := strings.LastIndexByte(line, ')')
	if end < 0 {
		return nil
	}
	return strings.Fields(line[end+1:])
}

// procCPU is a process's user+system CPU so far (USER_HZ is 100 on Linux).
func procCPU(pid int) (time.Duration, bool) {
	f := statFields(pid)
	if len(f) < 13 {
		return 0, false
	}
	u, err1 := strconv.ParseInt(f[11], 10, 64)
	s, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, false
	}
	return time.Duration(u+s) * time.Second / 100, true
}

func parentPID(pid int) int {
	f := statFields(pid)
	if len(f) < 2 {
		return 0
	}
	n, _ := strconv.Atoi(f[1])
	return n
}

// activitySampler reads, every period, which statements the benchmark
// database's backends are running and what each waits for, if anything
// (pg_stat_activity, active ones other than its own; "cpu" when waiting
// for nothing), until stopped; stop returns the statements by how many
// samples found each running, most first, with their share of the samples
// (one sample can find several backends busy).
func (fb *fleetBench) activitySampler(period time.Duration) (stop func() string) {
	done := make(chan struct{})
	seen := map[string]int{}
	samples := 0
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(period)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
			}
			rows, err := fb.pool.Query(fb.ctx, `SELECT coalesce(wait_event_type || ':' || wait_event, 'cpu') || '  ' || regexp_replace(left(query, 160), '\s+', ' ', 'g') FROM pg_stat_activity
				WHERE datname = current_database() AND state = 'active' AND pid <> pg_backend_pid()`)
			if err != nil {
				continue
			}
			samples++
			for rows.Next() {
				var q string
				if rows.Scan(&q) == nil {
					seen[q]++
				}
			}
			rows.Close()
		}
	})
	return func() string {
		close(done)
		wg.Wait()
		type row struct {
			q string
			n int
		}
		var all []row
		for q, n := range seen {
			all = append(all, row{q, n})
		}
		sort.Slice(all, func(i, j int) bool { return all[i].n > all[j].n })
		var out strings.Builder
		fmt.Fprintf(&out, "%d samples every %s\n", samples, period)
		for _, r := range all {
			fmt.Fprintf(&out, "%6d %5.1f%%  %s\n", r.n, 100*float64(r.n)/float64(max(samples, 1)), r.q)
		}
		return out.String()
	}
}
