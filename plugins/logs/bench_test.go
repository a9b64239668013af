package logs

import (
	"compress/gzip"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"
)

// BenchmarkFit packs three logs of 4 MiB each into a 256 KiB cap, dropping
// the oldest lines, beside a floor measured in the same run: one gzip pass
// over the same raw bytes, the least any packer must do. The ratio is the
// cost of finding the cut.
func BenchmarkFit(b *testing.B) {
	dir := b.TempDir()
	var parts []*part
	var raw []string
	for u := 0; u < 3; u++ {
		var sb strings.Builder
		for i := 0; sb.Len() < 4<<20; i++ {
			fmt.Fprintf(&sb, "2026-04-12T10:%02d:%02d+0000 node unit%d[1]: line %d r=%d\n", (i/60)%60, i%60, u, i, (i*7919)%100003)
		}
		p := filepath.Join(dir, fmt.Sprintf("u%d.log", u))
		if err := os.WriteFile(p, []byte(sb.String()), 0o600); err != nil {
			b.Fatal(err)
		}
		raw = append(raw, p)
		parts = append(parts, &part{Name: fmt.Sprintf("journal/u%d.log", u), path: p, Size: int64(sb.Len()), Logs: true})
	}
	c := &collector{cfg: Config{}.withDefaults(), dir: dir, since: time.Now().Add(-DefaultWindow)}
	var fits, floors []time.Duration
	// One sample takes about half a second: cap the samples, so that make
	// bench's -benchtime 2000x measures 20 runs rather than 15 minutes.
	samples := b.N
	if samples > 20 {
		samples = 20
	}
	b.ResetTimer()
	for i := 0; i < samples; i++ {
		for _, p := range parts {
			p.offset = 0
		}
		start := time.Now()
		bt, err := c.fit(filepath.Join(dir, "bundle.tar.gz"), parts, 256<<10, DefaultWindow)
		if err != nil || bt.size > 256<<10 {
			b.Fatalf("fit: %v (%d bytes)", err, bt.size)
		}
		fits = append(fits, time.Since(start))

		start = time.Now()
		zw, _ := gzip.NewWriterLevel(io.Discard, gzip.DefaultCompression)
		for _, p := range raw {
			f, _ := os.Open(p)
			_, _ = io.Copy(zw, f)
			f.Close()
		}
		_ = zw.Close()
		floors = append(floors, time.Since(start))
	}
	b.StopTimer()
	med := func(d []time.Duration) float64 {
		sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
		return float64(d[len(d)/2].Nanoseconds())
	}
	fit, floor := med(fits), med(floors)
	b.ReportMetric(fit, "p50-ns")
	b.ReportMetric(floor, "floor-p50-ns")
	b.ReportMetric(fit/floor, "ratio")
}
