package archive

import (
	"bytes"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"
)

// BenchmarkEncodeObject encodes an hour of 600 records (about 200 KB of
// JSON lines) as EncodeObject does, with its encoder kept between
// objects, beside a new encoder for each object, as it was written before
// (baseline-ns, baseline-B), in the same run: ratio-time and ratio-bytes
// are the kept encoder's over the new one's.
func BenchmarkEncodeObject(b *testing.B) {
	lines := make([][]byte, 600)
	for i := range lines {
		lines[i] = fmt.Appendf(nil, `{"type":"command","row":{"id":"cmd_%09d","kind":"bench.refresh","node_id":"node_%d","state":"succeeded","result":{"gpus":8,"ok":true},"created_at":"2026-06-01T10:%02d:00+00:00","requester":"user-%d","requested_via":"api","payload":null,"reason":"","message":""}}`, i, i%1000, i%60, i%20)
	}
	measure := func(n int, encode func() error) (time.Duration, uint64) {
		b.Helper()
		before := allocated()
		t0 := time.Now()
		for range n {
			if err := encode(); err != nil {
				b.Fatal(err)
			}
		}
		took := time.Since(t0)
		return took / time.Duration(n), (allocated() - before) / uint64(n)
	}
	fresh := func() error {
		var buf bytes.Buffer
		enc, err := zstd.NewWriter(&buf, encoderOptions()...)
		if err != nil {
			return err
		}
		return writeLines(enc, lines)
	}
	kept := func() error {
		_, _, err := EncodeObject(lines)
		return err
	}
	// Warm both, then measure them in turn.
	measure(3, fresh)
	measure(3, kept)
	var baseT, keptT time.Duration
	var baseB, keptB uint64
	for b.Loop() {
		baseT, baseB = measure(20, fresh)
		keptT, keptB = measure(20, kept)
	}
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(float64(keptT.Nanoseconds()), "object-ns")
	b.ReportMetric(float64(keptB), "object-B")
	b.ReportMetric(float64(baseT.Nanoseconds()), "baseline-ns")
	b.ReportMetric(float64(baseB), "baseline-B")
	b.ReportMetric(float64(keptT)/float64(baseT), "ratio-time")
	b.ReportMetric(float64(keptB)/float64(baseB), "ratio-bytes")
}

// allocated is the bytes this process has allocated so far.
func allocated() uint64 {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.TotalAlloc
}
