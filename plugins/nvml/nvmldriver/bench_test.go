package nvmldriver

import (
	"context"
	"encoding/json"
	"sort"
	"testing"
	"time"

	"github.com/better-compute/commands/plugins/internal/gpu"
	"github.com/better-compute/commands/plugins/internal/gpu/collect"
	"github.com/better-compute/commands/plugins/internal/gpu/gputest"
	"github.com/better-compute/commands/plugins/internal/gpu/sysview"
	"github.com/better-compute/commands/plugins/nvml"
)

// BenchmarkDiagNVML measures one diag.nvml run over the inventory of an
// 8-GPU mock server (go-nvml's dgxh200, two faults), as the handler does it
// from bcd's stored inventory: decode the JSON, run every check, encode the
// report. The floor, measured in the same run, is json.Unmarshal of the
// same inventory; p50 per run of each, and their ratio.
func BenchmarkDiagNVML(b *testing.B) {
	d, err := Open("mock:dgxh200", "gpu=3:row-remap-pending,gpu=5:ecc-uncorrectable=2")
	if err != nil {
		b.Fatal(err)
	}
	defer d.Close()
	root := gputest.NewRoot(b, "boot")
	root.AddHealthyGPUs(8)
	c := &collect.Collector{Kernel: sysview.View{Root: root.Dir}, NVML: d, SMI: nvml.NewMockSMI(d), KmsgPath: gputest.WriteKmsg(b, b.TempDir(), "")}
	inv, err := c.Collect(context.Background(), collect.Options{})
	if err != nil {
		b.Fatal(err)
	}
	raw, err := json.Marshal(inv)
	if err != nil {
		b.Fatal(err)
	}

	runs := make([]time.Duration, 0, b.N)
	floors := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		var x gpu.Inventory
		if err := json.Unmarshal(raw, &x); err != nil {
			b.Fatal(err)
		}
		floors = append(floors, time.Since(start))

		start = time.Now()
		got, err := gpu.Decode(raw)
		if err != nil {
			b.Fatal(err)
		}
		rep := nvml.Diagnose(got, nvml.DiagOptions{ExpectedCount: 8})
		if _, err := json.Marshal(rep); err != nil {
			b.Fatal(err)
		}
		runs = append(runs, time.Since(start))
		if rep.Status != nvml.StatusFail || len(rep.Failed()) != 2 {
			b.Fatalf("unexpected report: %+v", rep.Failed())
		}
	}
	b.StopTimer()
	p50 := func(ds []time.Duration) float64 {
		sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
		return float64(ds[len(ds)/2].Nanoseconds())
	}
	run, floor := p50(runs), p50(floors)
	b.ReportMetric(run, "p50-ns")
	b.ReportMetric(floor, "floor-p50-ns")
	b.ReportMetric(run/floor, "ratio")
}
