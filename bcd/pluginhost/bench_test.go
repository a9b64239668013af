package pluginhost_test

import (
	"bufio"
	"context"
	"encoding/json"
	"net"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/better-compute/commands/bcd/pluginhost"
	"github.com/better-compute/commands/internal/testplugins"
	"github.com/better-compute/commands/sdk/kind"
)

// percentile returns the p-th percentile (0..100) of sorted samples.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(float64(len(sorted)-1) * p / 100)
	return sorted[i]
}

// report puts p50 and p99 of samples beside the floor's, and their ratio.
func report(b *testing.B, samples, floor []time.Duration) {
	slices.Sort(samples)
	slices.Sort(floor)
	p50, p99 := percentile(samples, 50), percentile(samples, 99)
	f50, f99 := percentile(floor, 50), percentile(floor, 99)
	b.ReportMetric(float64(p50.Nanoseconds()), "p50-ns")
	b.ReportMetric(float64(p99.Nanoseconds()), "p99-ns")
	b.ReportMetric(float64(f50.Nanoseconds()), "floor-p50-ns")
	b.ReportMetric(float64(f99.Nanoseconds()), "floor-p99-ns")
	if f50 > 0 {
		b.ReportMetric(float64(p50)/float64(f50), "ratio")
	}
}

// floorUnaryRPC times bare unary gRPC calls over a unix socket: the least a
// command through a plugin could cost.
func floorUnaryRPC(b *testing.B, n int) []time.Duration {
	sock := filepath.Join(b.TempDir(), "floor.sock")
	ln, err := net.Listen("unix", sock)
	require.NoError(b, err)
	srv := grpc.NewServer()
	healthpb.RegisterHealthServer(srv, health.NewServer())
	go func() { _ = srv.Serve(ln) }()
	defer srv.Stop()
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(b, err)
	defer conn.Close()
	hc := healthpb.NewHealthClient(conn)
	ctx := context.Background()
	_, err = hc.Check(ctx, &healthpb.HealthCheckRequest{})
	require.NoError(b, err)
	out := make([]time.Duration, 0, n)
	for range n {
		start := time.Now()
		_, err := hc.Check(ctx, &healthpb.HealthCheckRequest{})
		out = append(out, time.Since(start))
		require.NoError(b, err)
	}
	return out
}

// BenchmarkExecute_WarmNoop times example.noop through the host on a running
// plugin, per command, beside a bare unary gRPC call over a unix socket.
// Target: p50 under 1 ms.
func BenchmarkExecute_WarmNoop(b *testing.B) {
	f := newFixture(b)
	install(b, f.dir, examplePkg, "bc-kind-example")
	f.cfg.LogLevel = "warn"
	h := mustStart(b, f, nil)
	ctx := context.Background()
	cmd := kind.Command{ID: "cmd_bench", Kind: "example.noop", Payload: json.RawMessage(`{}`)}
	for range 50 { // warm the connection and the plugin
		_, err := h.Execute(ctx, cmd, nil)
		require.NoError(b, err)
	}
	samples := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		res, err := h.Execute(ctx, cmd, nil)
		samples = append(samples, time.Since(start))
		if err != nil || res.Status != kind.StatusSucceeded {
			b.Fatalf("execute: %v %+v", err, res)
		}
	}
	b.StopTimer()
	report(b, samples, floorUnaryRPC(b, b.N))
}

// coldSamples caps the cold-start samples: each is a process start, and
// `make bench` runs -benchtime 2000x.
const coldSamples = 30

// BenchmarkColdStart times a plugin's cold start (New and Start until its
// manifests are read) beside spawning a bare Go gRPC server until its first
// successful RPC. Target: under 100 ms.
func BenchmarkColdStart(b *testing.B) {
	f := newFixture(b)
	install(b, f.dir, examplePkg, "bc-kind-example")
	f.cfg.Dir = f.dir
	floorBin := install(b, b.TempDir(), testplugins.GRPCFloor, "grpc-floor")
	n := min(b.N, coldSamples)
	samples := make([]time.Duration, 0, n)
	floor := make([]time.Duration, 0, n)
	logger := hclog.New(&hclog.LoggerOptions{Output: f.logs, Level: hclog.Warn})
	b.ResetTimer()
	for range n {
		start := time.Now()
		h := pluginhost.New(logger, f.cfg, nil)
		err := h.Start(context.Background())
		samples = append(samples, time.Since(start))
		require.NoError(b, err)
		require.NotEmpty(b, h.Manifests())
		require.NoError(b, h.Close())

		floor = append(floor, spawnFloor(b, floorBin))
	}
	b.StopTimer()
	report(b, samples, floor)
	// ns/op would divide coldSamples starts by b.N: report a start instead.
	b.ReportMetric(float64(percentile(samples, 50).Nanoseconds()), "ns/op")
}

// spawnFloor starts grpc-floor, waits for its ready line, makes one RPC and
// returns the time from exec to that RPC's answer.
func spawnFloor(b *testing.B, bin string) time.Duration {
	sock := filepath.Join(b.TempDir(), "s")
	start := time.Now()
	cmd := exec.Command(bin, sock)
	stdout, err := cmd.StdoutPipe()
	require.NoError(b, err)
	require.NoError(b, cmd.Start())
	defer func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}()
	line, err := bufio.NewReader(stdout).ReadString('\n')
	require.NoError(b, err)
	require.Equal(b, "ready\n", line)
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(b, err)
	defer conn.Close()
	_, err = healthpb.NewHealthClient(conn).Check(context.Background(), &healthpb.HealthCheckRequest{})
	took := time.Since(start)
	require.NoError(b, err)
	return took
}
