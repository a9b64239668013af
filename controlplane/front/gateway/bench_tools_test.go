package gateway_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/better-compute/commands/controlplane/testing/sim"
	"github.com/better-compute/commands/controlplane/trust/pki"
	"github.com/better-compute/commands/internal/sessiongrpc"
)

// BenchmarkSessions' instruments: the scheduler's lateness, the process's
// memory, bc-sim's run and its marks, the idle load and the bare floors.

// lateSampler sleeps period in a loop on its own goroutine and records how
// much later than asked each sleep ended: the scheduling delay this process
// sees (the OS's run queue on a shared machine, the Go scheduler), which
// any latency measured over the same window also pays. On two cores shared
// by the gateway, PostgreSQL and bc-sim it reaches several milliseconds.
type lateSampler struct {
	period time.Duration
	stop   chan struct{}
	done   chan struct{}
	late   []time.Duration
}

func startLateSampler(period time.Duration) *lateSampler {
	l := &lateSampler{period: period, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(l.done)
		for {
			select {
			case <-l.stop:
				return
			default:
			}
			t0 := time.Now()
			time.Sleep(l.period)
			l.late = append(l.late, time.Since(t0)-l.period)
		}
	}()
	return l
}

// finish stops the sampler and summarises what it recorded.
func (l *lateSampler) finish() sim.Latency {
	close(l.stop)
	<-l.done
	return sim.Summarise(l.late)
}

// perSession is memory per idle session.
type perSession struct{ total, heap float64 }

// inUse reads this process's heap and stacks in use. It collects twice,
// and the second time also returns the freed pages to
// the system (debug.FreeOSMemory), so that the idle window after it does
// not count the runtime's background scavenger returning them (a fifth of
// the gateway's idle CPU at 10,000 sessions): a gateway that was never
// made to collect does not pay that.
func inUse() (heap, total uint64) {
	runtime.GC()
	debug.FreeOSMemory()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse, ms.HeapInuse + ms.StackInuse
}

// runSim runs bc-sim with n nodes and --wait-stdin: once the server counts n
// sessions, it measures this process's memory delta per session, runs idle
// (if any) while the fleet is idle, then lets bc-sim run its workload and
// reads its JSON report.
func runSim(b *testing.B, bin string, n int, sessions func() int, idle func(), mark func(name string, simPID int), args ...string) (simReport, perSession) {
	b.Helper()
	h0, t0 := inUse()
	args = append(args, "--nodes", strconv.Itoa(n), "--json", "--wait-stdin")
	if dir := os.Getenv("BC_BENCH_CPUPROFILE"); dir != "" && idle != nil {
		args = append(args, "--cpuprofile", filepath.Join(dir, fmt.Sprintf("sim-%d.pprof", n)))
	}
	cmd := exec.Command(bin, args...)
	var stdout bytes.Buffer
	stderr := &markWriter{}
	cmd.Stdout, cmd.Stderr = &stdout, stderr
	stdin, err := cmd.StdinPipe()
	require.NoError(b, err)
	require.NoError(b, cmd.Start())
	if mark != nil {
		stderr.setMark(func(name string) { mark(name, cmd.Process.Pid) })
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	deadline := time.Now().Add(3 * time.Minute)
	for sessions() < n {
		select {
		case err := <-exited:
			b.Fatalf("bc-sim exited before %d sessions were open: %v\n%s", n, err, stderr.String())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			b.Fatalf("only %d of %d sessions open after 3 minutes\n%s", sessions(), n, stderr.String())
		}
	}
	h1, t1 := inUse()
	mem := perSession{total: float64(int64(t1)-int64(t0)) / float64(n), heap: float64(int64(h1)-int64(h0)) / float64(n)}
	if idle != nil {
		idle()
	}
	// BC_BENCH_CPUPROFILE=dir profiles the workload alone (not the
	// sessions' handshakes): this process as gateway-N.pprof, bc-sim's
	// own run as sim-N.pprof.
	if dir := os.Getenv("BC_BENCH_CPUPROFILE"); dir != "" && idle != nil {
		// And what it allocated: gateway-N.allocs-before.pprof and
		// gateway-N.allocs.pprof, for go tool pprof -sample_index=alloc_space
		// -base (the allocation profile counts from the process's start).
		// Each write collects first, so a profiled run's first fan-out
		// starts from a collected heap: compare its faults and time with
		// other profiled runs only.
		writeAllocs(b, filepath.Join(dir, fmt.Sprintf("gateway-%d.allocs-before.pprof", n)))
		defer writeAllocs(b, filepath.Join(dir, fmt.Sprintf("gateway-%d.allocs.pprof", n)))
		f, err := os.Create(filepath.Join(dir, fmt.Sprintf("gateway-%d.pprof", n)))
		require.NoError(b, err)
		require.NoError(b, pprof.StartCPUProfile(f))
		defer func() { pprof.StopCPUProfile(); _ = f.Close() }()
	}
	_, err = io.WriteString(stdin, "go\n")
	require.NoError(b, err)
	select {
	case err := <-exited:
		require.NoError(b, err, "bc-sim: %s", stderr.String())
	case <-time.After(5 * time.Minute):
		_ = cmd.Process.Kill()
		b.Fatalf("bc-sim did not finish in 5 minutes\n%s", stderr.String())
	}
	var rep simReport
	require.NoError(b, json.Unmarshal(stdout.Bytes(), &rep), "bc-sim output: %s\n%s", stdout.String(), stderr.String())
	require.Equal(b, n, rep.Nodes)
	return rep, mem
}

// markWriter keeps bc-sim's stderr, and calls its mark function for each
// line "mark <name>" as it arrives (bc-sim --marks).
type markWriter struct {
	lock sync.Mutex
	buf  bytes.Buffer
	line []byte
	mark func(name string)
}

func (w *markWriter) setMark(mark func(name string)) {
	w.lock.Lock()
	defer w.lock.Unlock()
	w.mark = mark
}

func (w *markWriter) Write(p []byte) (int, error) {
	w.lock.Lock()
	defer w.lock.Unlock()
	w.buf.Write(p)
	w.line = append(w.line, p...)
	for {
		i := bytes.IndexByte(w.line, '\n')
		if i < 0 {
			return len(p), nil
		}
		if name, ok := strings.CutPrefix(string(w.line[:i]), "mark "); ok && w.mark != nil {
			w.mark(name)
		}
		w.line = append(w.line[:0], w.line[i+1:]...)
	}
}

func (w *markWriter) String() string {
	w.lock.Lock()
	defer w.lock.Unlock()
	return w.buf.String()
}

// idleLoad measures, over window with every session idle, this process's
// CPU share (user+system, percent of one core) and the database's committed
// transactions per second: what thousands of per-session polls cost.
func idleLoad(b *testing.B, pool *pgxpool.Pool, window time.Duration) (cpu, qps float64) {
	b.Helper()
	ctx := context.Background()
	xacts := func() int64 {
		var n int64
		require.NoError(b, pool.QueryRow(ctx, `SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()`).Scan(&n))
		return n
	}
	var r0, r1 syscall.Rusage
	require.NoError(b, syscall.Getrusage(syscall.RUSAGE_SELF, &r0))
	x0, w0 := xacts(), time.Now()
	// A measurement window, not a synchronisation: the load is sampled
	// over a fixed time with nothing to wait for.
	time.Sleep(window)
	require.NoError(b, syscall.Getrusage(syscall.RUSAGE_SELF, &r1))
	x1, el := xacts(), time.Since(w0)
	used := time.Duration(r1.Utime.Nano()-r0.Utime.Nano()) + time.Duration(r1.Stime.Nano()-r0.Stime.Nano())
	// pg_stat_database is updated by backends at most every second or so,
	// so the rate is an estimate over the window.
	return 100 * used.Seconds() / el.Seconds(), float64(x1-x0) / el.Seconds()
}

// bareRoundTrips measures the floor: a bare gRPC unary round trip (health
// Check) on loopback over the same mTLS, one at a time for latency, and the
// time for n of them issued 64 at a time (the fan-out's floor).
func bareRoundTrips(b *testing.B, ca *pki.CA, n int) (sim.Latency, time.Duration, time.Duration) {
	b.Helper()
	certPEM, keyPEM, err := ca.IssueServer("127.0.0.1")
	require.NoError(b, err)
	scert, err := tls.X509KeyPair(certPEM, keyPEM)
	require.NoError(b, err)
	// The sessions' transport settings, so that the floor differs from a
	// session only by what the gateway does.
	srv := grpc.NewServer(append([]grpc.ServerOption{grpc.Creds(credentials.NewTLS(&tls.Config{
		Certificates: []tls.Certificate{scert}, ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: ca.Pool(), MinVersion: tls.VersionTLS13,
	}))}, sessiongrpc.ServerOptions()...)...)
	healthpb.RegisterHealthServer(srv, health.NewServer())
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(b, err)
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()
	certs, err := sim.IssueCerts(ca, []string{"node_floor"})
	require.NoError(b, err)
	conn, err := grpc.NewClient(lis.Addr().String(), append([]grpc.DialOption{grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{
		Certificates: certs, RootCAs: ca.Pool(), MinVersion: tls.VersionTLS13,
	}))}, sessiongrpc.DialOptions()...)...)
	require.NoError(b, err)
	defer conn.Close()
	client := healthpb.NewHealthClient(conn)
	ctx := context.Background()
	call := func() {
		_, err := client.Check(ctx, &healthpb.HealthCheckRequest{})
		require.NoError(b, err)
	}
	call() // the handshake is not part of a round trip
	rtts := make([]time.Duration, 0, 2000)
	for range 2000 {
		t0 := time.Now()
		call()
		rtts = append(rtts, time.Since(t0))
	}
	t0, c0 := time.Now(), takeCPUSnapshot(0).self
	work := make(chan struct{}, n)
	for range n {
		work <- struct{}{}
	}
	close(work)
	var wg sync.WaitGroup
	for range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range work {
				call()
			}
		}()
	}
	wg.Wait()
	return sim.Summarise(rtts), time.Since(t0), takeCPUSnapshot(0).self - c0
}

// writeAllocs writes this process's allocation profile to path, after a
// collection: the profile stands as of the last one, and a gateway holding
// thousands of sessions may finish none in a whole workload.
func writeAllocs(b *testing.B, path string) {
	runtime.GC()
	f, err := os.Create(path)
	require.NoError(b, err)
	require.NoError(b, pprof.Lookup("allocs").WriteTo(f, 0))
	require.NoError(b, f.Close())
}
