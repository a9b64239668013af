package daemon

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/better-compute/commands/bcd/journal"
	"github.com/better-compute/commands/internal/testutil"
)

func percentile(d []time.Duration, p float64) time.Duration {
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[int(float64(len(s)-1)*p)]
}

// grpcFloor measures n bare unary gRPC calls (the health check) to a Go
// binary serving gRPC on a unix socket: the same transport bcd uses to
// reach a plugin, with nothing else in the way.
func grpcFloor(b *testing.B, n int) []time.Duration {
	bin := testutil.BuildBinary(b, "./internal/testplugins/cmd/grpc-floor")
	sock := filepath.Join(b.TempDir(), "floor.sock")
	cmd := exec.Command(bin, sock)
	require.NoError(b, cmd.Start())
	b.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	// Until the server listens: its socket file appears at bind, a moment
	// before listen, and a dial in between is refused.
	testutil.WaitFor(b, 30*time.Second, "the floor server's socket to accept", func() bool {
		c, err := net.Dial("unix", sock)
		if err != nil {
			return false
		}
		_ = c.Close()
		return true
	})
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(b, err)
	defer conn.Close()
	c := healthpb.NewHealthClient(conn)
	ctx := context.Background()
	for i := 0; i < 50; i++ { // warm
		_, err := c.Check(ctx, &healthpb.HealthCheckRequest{})
		require.NoError(b, err)
	}
	out := make([]time.Duration, n)
	for i := range out {
		t0 := time.Now()
		_, err := c.Check(ctx, &healthpb.HealthCheckRequest{})
		out[i] = time.Since(t0)
		require.NoError(b, err)
	}
	return out
}

// BenchmarkWarmPath runs example.noop through bcd's whole path (acceptance,
// journal synced to disk, lane worker, plugin over gRPC, outcome journaled
// and synced) one command at a time, and reports p50 and p99 beside the
// floor: a bare unary gRPC call over a unix socket, measured in the same run.
func BenchmarkWarmPath(b *testing.B) {
	n := start(b, "", nil)
	ctx := context.Background()
	run := func(id string) {
		ch, err := n.d.Submit(ctx, cmd(id, "example.noop", map[string]any{}))
		if err != nil {
			b.Fatal(err)
		}
		var outcome Update
		for u := range ch {
			outcome = u
		}
		if outcome.State != journal.StateSucceeded {
			b.Fatalf("%s: %+v", id, outcome)
		}
	}
	for i := 0; i < 50; i++ { // warm: plugin connection, journal pages
		run(fmt.Sprintf("cmd_warm_%d", i))
	}
	lat := make([]time.Duration, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		run(fmt.Sprintf("cmd_bench_%d", i))
		lat[i] = time.Since(t0)
	}
	b.StopTimer()
	floor := grpcFloor(b, max(b.N, 200))
	p50, p99 := percentile(lat, 0.50), percentile(lat, 0.99)
	f50, f99 := percentile(floor, 0.50), percentile(floor, 0.99)
	b.ReportMetric(float64(p50.Nanoseconds()), "p50-ns")
	b.ReportMetric(float64(p99.Nanoseconds()), "p99-ns")
	b.ReportMetric(float64(f50.Nanoseconds()), "floor-p50-ns")
	b.ReportMetric(float64(f99.Nanoseconds()), "floor-p99-ns")
	b.ReportMetric(float64(p50)/float64(f50), "ratio")
	fs := fsyncFloor(b, n.dir, 200)
	b.ReportMetric(float64(fs.Nanoseconds()), "fsync-p50-ns")
	// Issue 17's floor: one fdatasync plus one bare gRPC call, the least a
	// journaled command through a plugin could cost.
	b.ReportMetric(float64((fs + f50).Nanoseconds()), "floor-journaled-ns")
	b.ReportMetric(float64(p50)/float64(fs+f50), "ratio-journaled")
}

// fsyncFloor is the median of a 512-byte write plus fsync in dir: what one
// durable journal write cannot beat on this disk (the warm path syncs one:
// the acceptance, as a frame of the journal's write-ahead log; the outcome
// rides in the next one).
func fsyncFloor(b *testing.B, dir string, n int) time.Duration {
	f, err := os.Create(filepath.Join(dir, "fsync-floor"))
	require.NoError(b, err)
	defer f.Close()
	buf := make([]byte, 512)
	out := make([]time.Duration, n)
	for i := range out {
		t0 := time.Now()
		_, err := f.WriteAt(buf, int64(i%8)*4096)
		require.NoError(b, err)
		require.NoError(b, f.Sync())
		out[i] = time.Since(t0)
	}
	return percentile(out, 0.5)
}

// BenchmarkWarmPathParallel runs example.noop from 8 submitters at once
// (the control lane's size): the journal's group commit shares each sync
// among the commands waiting for one. It reports the per-command cost
// (wall time over commands) beside the sequential p50 of the same run.
func BenchmarkWarmPathParallel(b *testing.B) {
	n := start(b, "", nil)
	ctx := context.Background()
	run := func(id string) {
		ch, err := n.d.Submit(ctx, cmd(id, "example.noop", map[string]any{}))
		if err != nil {
			b.Error(err)
			return
		}
		var outcome Update
		for u := range ch {
			outcome = u
		}
		if outcome.State != journal.StateSucceeded {
			b.Errorf("%s: %+v", id, outcome)
		}
	}
	seq := make([]time.Duration, 100)
	for i := range seq {
		t0 := time.Now()
		run(fmt.Sprintf("cmd_seq_%d", i))
		seq[i] = time.Since(t0)
	}
	const workers = 8
	b.ResetTimer()
	t0 := time.Now()
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := w; i < b.N; i += workers {
				run(fmt.Sprintf("cmd_par_%d", i))
			}
		}(w)
	}
	wg.Wait()
	per := time.Since(t0) / time.Duration(b.N)
	b.StopTimer()
	s50 := percentile(seq, 0.5)
	b.ReportMetric(float64(per.Nanoseconds()), "per-cmd-ns")
	b.ReportMetric(float64(s50.Nanoseconds()), "floor-seq-p50-ns")
	b.ReportMetric(float64(per)/float64(s50), "ratio")
}
