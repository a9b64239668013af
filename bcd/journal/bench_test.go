package journal

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"testing"
	"time"
)

// BenchmarkInsertThenUpdate is one command's journal cost: the accepted
// record and the outcome, each written and synced. The floor, measured in
// the same run on the same disk, is one 512-byte write plus fdatasync; each
// write is one frame of the write-ahead log and one fdatasync, so two
// floors is the least this path can cost (a bbolt commit per write, two
// syncs and its pages, measured 6 to 7 floors).
func BenchmarkInsertThenUpdate(b *testing.B) {
	dir := b.TempDir()
	j, err := Open(nil, dir, Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer j.Close()
	lat := make([]time.Duration, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		r := Record{ID: fmt.Sprintf("cmd_%d", i), Kind: "example.noop", State: StateAccepted, NotAfter: time.Now()}
		if _, _, err := j.Insert(r); err != nil {
			b.Fatal(err)
		}
		r.State = StateSucceeded
		if err := j.Update(r); err != nil {
			b.Fatal(err)
		}
		lat[i] = time.Since(t0)
	}
	b.StopTimer()
	f, err := os.Create(filepath.Join(dir, "floor"))
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	floor := make([]time.Duration, max(b.N, 200))
	buf := make([]byte, 512)
	for i := range floor {
		t0 := time.Now()
		if _, err := f.WriteAt(buf, int64(i%8)*4096); err != nil {
			b.Fatal(err)
		}
		if err := f.Sync(); err != nil {
			b.Fatal(err)
		}
		floor[i] = time.Since(t0)
	}
	p := func(d []time.Duration, q float64) time.Duration {
		s := append([]time.Duration(nil), d...)
		sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
		return s[int(float64(len(s)-1)*q)]
	}
	b.ReportMetric(float64(p(lat, 0.5).Nanoseconds()), "p50-ns")
	b.ReportMetric(float64(p(lat, 0.99).Nanoseconds()), "p99-ns")
	b.ReportMetric(float64(p(floor, 0.5).Nanoseconds()), "floor-p50-ns")
	b.ReportMetric(float64(p(lat, 0.5))/float64(p(floor, 0.5)), "ratio")
}
