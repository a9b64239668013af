package smi

import (
	"os"
	"testing"

	"github.com/better-compute/commands/plugins/internal/gpu"
)

// FuzzParseNvidiaSmiCSV feeds arbitrary output to the CSV parsers: they
// must never panic, and every GPU they return must carry a GPU- UUID and a
// normalised bus id.
func FuzzParseNvidiaSmiCSV(f *testing.F) {
	for _, p := range []string{"testdata/query-gpu-all-fields-csv-590.48.01-h100-masked.csv", "testdata/err-unable-to-determine-device-handle-unknown-error.txt"} {
		if b, err := os.ReadFile(p); err == nil {
			f.Add(b)
		}
	}
	f.Add([]byte("0, GPU-00000000-1111-2222-3333-000000000000, 00000000:18:00.0, NVIDIA H100 80GB HBM3, 550.54.15, Enabled, Disabled, Disabled, Enabled, Enabled, 0, 0, 5, 5, 16, 16\n"))
	f.Add([]byte("0, GPU-1, 00000000:18:00.0, n, [N/A], [Not Supported], [N/A], [N/A], [N/A], [N/A], [N/A], [N/A], [N/A], [N/A], [N/A], [N/A]\n"))
	f.Add([]byte("GPU-1, 0, 1, Yes, No\n"))
	f.Add([]byte("\"unterminated, quote\n"))
	f.Add([]byte("index, name, pci.bus_id\n0, NVIDIA H100 80GB HBM3, 00000000:18:00.0\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, parse := range []func([]byte) ([]gpu.GPU, int, error){ParseQueryGPU, ParseQueryGPUWithHeader} {
			gpus, _, _ := parse(b)
			for _, g := range gpus {
				if len(g.UUID) < 4 || g.UUID[:4] != "GPU-" || gpu.NormalizeBusID(g.BusID) != g.BusID || g.BusID == "" {
					t.Fatalf("bad GPU from parser: %+v", g)
				}
			}
		}
		_, _, _ = ParseRemappedRows(b)
	})
}
