package dcgm_test

import (
	"encoding/json"
	"sort"
	"testing"
	"time"

	"github.com/better-compute/commands/plugins/dcgm"
)

// BenchmarkParseDiag parses a level 3 report beside a floor measured in the
// same run: decoding the same bytes into a generic map, which ParseDiag
// does first. The ratio is what the lenient walk costs on top.
func BenchmarkParseDiag(b *testing.B) {
	in := fixture(b, "diag-r3-j-dcgm3-tesla-t4-pass.json")
	parse := make([]time.Duration, 0, b.N)
	floor := make([]time.Duration, 0, b.N)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		if _, err := dcgm.ParseDiag(in); err != nil {
			b.Fatal(err)
		}
		parse = append(parse, time.Since(start))

		start = time.Now()
		var m map[string]any
		if err := json.Unmarshal(in, &m); err != nil {
			b.Fatal(err)
		}
		floor = append(floor, time.Since(start))
	}
	b.StopTimer()
	p, f := p50(parse), p50(floor)
	b.ReportMetric(float64(p.Nanoseconds()), "p50-ns")
	b.ReportMetric(float64(f.Nanoseconds()), "floor-p50-ns")
	if f > 0 {
		b.ReportMetric(float64(p)/float64(f), "ratio")
	}
}

func p50(d []time.Duration) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2]
}
