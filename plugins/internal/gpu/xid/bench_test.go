package xid

import (
	"bufio"
	"bytes"
	"os"
	"testing"
	"time"

	"github.com/better-compute/commands/plugins/internal/gpu/gputest"
)

// BenchmarkParseKmsg measures kernel-log parsing in lines per second (kmsg
// records, XID messages, folding into the store) over a real capture with
// 636 Xid lines, beside a floor measured in the same run: bufio line
// scanning of the same bytes.
func BenchmarkParseKmsg(b *testing.B) {
	raw, err := os.ReadFile("testdata/xid-13-43-decode-iso.dmesg")
	if err != nil {
		b.Fatal(err)
	}
	input := []byte(gputest.KmsgFromDmesg(string(raw), 1))
	lines := bytes.Count(input, []byte("\n"))

	var parse, floor time.Duration
	for i := 0; i < b.N; i++ {
		start := time.Now()
		sc := bufio.NewScanner(bytes.NewReader(input))
		n := 0
		for sc.Scan() {
			n += len(sc.Bytes())
		}
		floor += time.Since(start)

		start = time.Now()
		s, _ := OpenStore("", "boot")
		p := &recordParser{fn: func(r Record) { s.Observe(r) }, st: &ReadStats{}}
		p.feed(input)
		p.flush()
		parse += time.Since(start)
		if p.st.Records != lines || len(s.Conditions(nil)) != 2 {
			b.Fatalf("parsed %d of %d lines, %d conditions", p.st.Records, lines, len(s.Conditions(nil)))
		}
	}
	perSec := func(d time.Duration) float64 { return float64(lines) * float64(b.N) / d.Seconds() }
	b.ReportMetric(perSec(parse), "lines/s")
	b.ReportMetric(perSec(floor), "floor-lines/s")
	b.ReportMetric(perSec(floor)/perSec(parse), "ratio")
}
