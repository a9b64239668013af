package smi

import (
	"bytes"
	"context"
	"encoding/csv"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/internal/testutil"
	"github.com/better-compute/commands/plugins/internal/gpu"
	"github.com/better-compute/commands/plugins/internal/gpu/gputest"
)

// The real capture of every --query-gpu field on an H100 (590.48.01, with
// its header and units) reads right, [N/A] cells and all.
func TestParseQueryGPUReadsTheRealH100Capture(t *testing.T) {
	b, err := os.ReadFile("testdata/query-gpu-all-fields-csv-590.48.01-h100-masked.csv")
	require.NoError(t, err)
	gpus, bad, err := ParseQueryGPUWithHeader(b)
	require.NoError(t, err)
	require.Zero(t, bad)
	require.Len(t, gpus, 1)
	g := gpus[0]
	require.Equal(t, 0, g.Index)
	require.Equal(t, "GPU-00000000-0000-0000-0000-000000000000", g.UUID)
	require.Equal(t, "0000:00:09", g.BusID)
	require.Equal(t, "NVIDIA H100 80GB HBM3", g.Name)
	require.Equal(t, "590.48.01", g.DriverVersion)
	require.Equal(t, true, *g.PersistenceMode)
	require.Equal(t, &gpu.MIG{Enabled: false}, g.MIG)
	require.Equal(t, true, *g.ECC.Enabled)
	require.Equal(t, uint64(0), *g.ECC.UncorrectableVolatile)
	require.Equal(t, uint64(0), *g.ECC.UncorrectableAggregate)
	require.Equal(t, &gpu.PCIe{WidthCurrent: 16, WidthMax: 16, WidthSamples: []int{16}, GenCurrent: 5, GenMax: 5}, g.PCIe)
	require.Equal(t, &gpu.RemappedRows{}, g.RemappedRows)
	require.Nil(t, g.Skipped)
	require.Equal(t, []string{gpu.SourceNvidiaSmi}, g.SeenBy)
}

// withoutColumn is a --query-gpu capture with its header without one column.
func withoutColumn(t *testing.T, capture []byte, column string) []byte {
	t.Helper()
	r := csv.NewReader(bytes.NewReader(capture))
	r.TrimLeadingSpace = true
	recs, err := r.ReadAll()
	require.NoError(t, err)
	drop := slices.Index(recs[0], column)
	require.GreaterOrEqual(t, drop, 0, "the capture has a %s column", column)
	var b bytes.Buffer
	w := csv.NewWriter(&b)
	for _, rec := range recs {
		require.NoError(t, w.Write(slices.Delete(rec, drop, drop+1)))
	}
	w.Flush()
	return b.Bytes()
}

// A --query-gpu CSV without a column the parser needs says which, rather
// than that no row was well-formed (the real H100 capture, a column cut).
func TestParseQueryGPUNamesAMissingColumn(t *testing.T) {
	b, err := os.ReadFile("testdata/query-gpu-all-fields-csv-590.48.01-h100-masked.csv")
	require.NoError(t, err)
	for _, column := range []string{"uuid", "index", "pci.bus_id"} {
		t.Run(column, func(t *testing.T) {
			gpus, _, err := ParseQueryGPUWithHeader(withoutColumn(t, b, column))
			require.ErrorIs(t, err, ErrMissingColumn)
			require.NotErrorIs(t, err, ErrNoRows)
			require.EqualError(t, err, "nvidia-smi --query-gpu CSV has no "+column+" column, which names a GPU")
			require.Empty(t, gpus)
		})
	}
	// Without rows too: the header alone says it.
	header, _, _ := bytes.Cut(withoutColumn(t, b, "uuid"), []byte("\n"))
	_, _, err = ParseQueryGPUWithHeader(header)
	require.ErrorIs(t, err, ErrMissingColumn)
	// With the column, the same capture still reads.
	_, _, err = ParseQueryGPUWithHeader(b)
	require.NoError(t, err)
}

func TestParseQueryGPUSkipsNotAvailableAndNotSupportedCells(t *testing.T) {
	row := gputest.SmiGPU{Index: "0", UUID: gputest.UUID(0), BusID: "00000000:18:00.0",
		ECC: "[N/A]", ECCVol: "[N/A]", ECCAgg: "[N/A]", MIG: "[Not Supported]", WidthCurrent: "[Unknown Error]"}
	gpus, bad, err := ParseQueryGPU([]byte(row.Row() + "\n"))
	require.NoError(t, err)
	require.Zero(t, bad)
	g := gpus[0]
	require.Nil(t, g.ECC)
	require.Nil(t, g.MIG)
	require.Nil(t, g.PCIe)
	require.Equal(t, map[string]string{
		gpu.FieldECCMode:   "skipped: not available on this GPU (nvidia-smi reports [N/A])",
		gpu.FieldECCErrors: "skipped: not available on this GPU (nvidia-smi reports [N/A])",
		gpu.FieldMIG:       "skipped: not supported by this GPU (nvidia-smi reports [Not Supported])",
		gpu.FieldPCIeLink:  "skipped: nvidia-smi reports [Unknown Error]",
	}, g.Skipped)
}

// "it answered when it exits 0 with at least one well-formed row"
func TestParseQueryGPUCountsMalformedRows(t *testing.T) {
	good := gputest.HealthyGPUs(2)
	out := "No devices were found\n" + good[0].Row() + "\n" +
		"x, GPU-1, 00000000:28:00.0, n, d, Enabled, Disabled, Disabled, Enabled, Enabled, 0, 0, 5, 5, 16, 16\n" +
		good[1].Row() + "\n"
	gpus, bad, err := ParseQueryGPU([]byte(out))
	require.NoError(t, err)
	require.Equal(t, 2, bad)
	require.Len(t, gpus, 2)

	_, _, err = ParseQueryGPU([]byte("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n"))
	require.ErrorIs(t, err, ErrNoRows)
	_, _, err = ParseQueryGPU(nil)
	require.ErrorIs(t, err, ErrNoRows)
}

func TestParseRemappedRows(t *testing.T) {
	out := gputest.UUID(0) + ", 0, 1, Yes, No\n" + gputest.UUID(1) + ", [N/A], [N/A], [N/A], [N/A]\n"
	rows, bad, err := ParseRemappedRows([]byte(out))
	require.NoError(t, err)
	require.Zero(t, bad)
	require.Equal(t, &gpu.RemappedRows{Uncorrectable: 1, Pending: true}, rows[0].Rows)
	require.Nil(t, rows[1].Rows)
	require.Equal(t, "not available on this GPU (nvidia-smi reports [N/A])", rows[1].Skipped)
}

func TestQueryAnswersWithGPUsAndRemappedRows(t *testing.T) {
	gs := gputest.HealthyGPUs(2)
	gs[1].RemapPending, gs[1].RemapUnc = "Yes", "2"
	fake := gputest.NewSmi(t, gputest.Answer(gs))
	a := Tool{Path: fake.Path, Timeout: 10 * time.Second}.Query(context.Background())
	require.True(t, a.Status.Answered, a.Status.Reason)
	require.Equal(t, 2, a.Status.GPUs)
	require.Equal(t, 0, *a.Status.ExitCode)
	require.Equal(t, gputest.BusID(1), a.GPUs[1].BusID)
	require.Equal(t, &gpu.RemappedRows{Uncorrectable: 2, Pending: true}, a.GPUs[1].RemappedRows)
	require.Equal(t, []string{
		"--query-gpu=" + strings.Join(QueryGPUFields, ",") + " --format=csv,noheader,nounits",
		"--query-remapped-rows=" + strings.Join(QueryRemappedRowsFields, ",") + " --format=csv,noheader,nounits",
	}, fake.Calls())
}

func TestQueryRemappedRowsFailureSkipsThemWithTheReason(t *testing.T) {
	a := gputest.Answer(gputest.HealthyGPUs(1))
	a.RemapOut, a.RemapExit = "Field \"remapped_rows.pending\" is not a valid field to query.\n", 2
	fake := gputest.NewSmi(t, a)
	ans := Tool{Path: fake.Path}.Query(context.Background())
	require.True(t, ans.Status.Answered)
	require.Nil(t, ans.GPUs[0].RemappedRows)
	require.Equal(t, `skipped: nvidia-smi failed (exit 2): Field "remapped_rows.pending" is not a valid field to query.`, ans.GPUs[0].SkipReason(gpu.FieldRemappedRows))
}

// Fake nvidia-smi executables: exits 9, 12, 15, 255, "In use by another client".
func TestQueryExplainsEachExitCode(t *testing.T) {
	for _, tc := range []struct {
		out    string
		exit   int
		reason string
	}{
		{"NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the latest NVIDIA driver is installed and running.\n", 9, "the NVIDIA driver is not loaded (nvidia-smi exit 9)"},
		{"NVIDIA-SMI couldn't find libnvidia-ml.so library in your system.\n", 12, "the NVML library was not found (nvidia-smi exit 12)"},
		{"Unable to determine the device handle for GPU0000:91:00.0: Unknown Error\n", 15, "a GPU has fallen off the bus (nvidia-smi exit 15)"},
		{"Unable to determine the device handle for GPU0000:91:00.0: Unknown Error\n", 255, "nvidia-smi failed (exit 255): Unable to determine the device handle for GPU0000:91:00.0: Unknown Error"},
		{"GPU 00000000:18:00.0: In use by another client\n", 255, "the GPU is in use by another client (nvidia-smi exit 255): GPU 00000000:18:00.0: In use by another client"},
		{"", 255, "nvidia-smi failed (exit 255)"},
		// Exit 0 with no well-formed row did not answer either.
		{"No devices were found\n", 0, "nvidia-smi exited 0 but printed no well-formed GPU row (1 malformed): No devices were found"},
	} {
		t.Run(strconv.Itoa(tc.exit), func(t *testing.T) {
			fake := gputest.NewSmi(t, gputest.SmiAnswer{GPUOut: tc.out, GPUExit: tc.exit})
			a := Tool{Path: fake.Path}.Query(context.Background())
			require.False(t, a.Status.Answered)
			require.Equal(t, tc.reason, a.Status.Reason)
			require.Equal(t, tc.exit, *a.Status.ExitCode)
			require.Empty(t, a.GPUs)
		})
	}
}

func TestQueryOfAMissingNvidiaSmi(t *testing.T) {
	a := Tool{Path: t.TempDir() + "/nvidia-smi"}.Query(context.Background())
	require.False(t, a.Status.Answered)
	require.Equal(t, "nvidia-smi is not installed (not found)", a.Status.Reason)
	require.Nil(t, a.Status.ExitCode)
}

// A hung nvidia-smi (a GSP hang) is killed by the timeout, children and all.
func TestQueryKillsAHungNvidiaSmi(t *testing.T) {
	fake := gputest.NewSmi(t, gputest.SmiAnswer{Hang: true})
	a := Tool{Path: fake.Path, Timeout: 1500 * time.Millisecond}.Query(context.Background())
	require.False(t, a.Status.Answered)
	require.True(t, strings.HasPrefix(a.Status.Reason, "nvidia-smi hung and was killed after "), a.Status.Reason)
	require.True(t, strings.HasSuffix(a.Status.Reason, " (a GSP or driver hang; see XID 119)"), a.Status.Reason)
	pid := fake.HangChild()
	require.NotZero(t, pid, "the hang started its child")
	testutil.WaitFor(t, 5*time.Second, "the hung nvidia-smi's child to die", func() bool { return gputest.Gone(pid) })
}

func TestCellAndIsInUse(t *testing.T) {
	v, why := Cell(" 16 ")
	require.Equal(t, "16", v)
	require.Empty(t, why)
	_, why = Cell("N/A")
	require.Equal(t, "not available on this GPU (nvidia-smi reports [N/A])", why)
	_, why = Cell("[Requested functionality has been deprecated]")
	require.Equal(t, "nvidia-smi reports [Requested functionality has been deprecated]", why)
	require.True(t, IsInUse([]byte("GPU 00000000:18:00.0: in use by another client")))
	require.False(t, IsInUse([]byte("ok")))
}
