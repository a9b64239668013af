package smi_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/internal/testutil"
	"github.com/better-compute/commands/plugins/internal/gpu/gputest"
	"github.com/better-compute/commands/plugins/internal/gpu/smi"
	"github.com/better-compute/commands/plugins/internal/gpu/toolexec"
)

var idFields = []string{"index", "uuid", "pci.bus_id"}

func TestReadRows(t *testing.T) {
	rows, err := smi.ReadRows([]byte("0, GPU-a, 00000000:3B:00.0\n\n1, GPU-b, 00000000:86:00.0\n"), idFields)
	require.NoError(t, err)
	require.Equal(t, []smi.Row{
		{"index": "0", "uuid": "GPU-a", "pci.bus_id": "00000000:3B:00.0"},
		{"index": "1", "uuid": "GPU-b", "pci.bus_id": "00000000:86:00.0"},
	}, rows)

	rows, err = smi.ReadRows([]byte("No running processes found\n"), idFields)
	require.NoError(t, err)
	require.Empty(t, rows)

	_, err = smi.ReadRows([]byte("0, GPU-a, 00000000:3B:00.0\n1, GPU-b\n"), idFields)
	require.ErrorContains(t, err, "line 2: 2 fields, want 3")
}

// Cell is the one reading of a cell with no value, for the inventory and
// for gpu.reset's health alike.
func TestCellWithoutAValue(t *testing.T) {
	for _, c := range []string{"[N/A]", "[Not Supported]", "N/A", "", " ", "Requested functionality has been deprecated", "[Unknown Error]"} {
		v, missing := smi.Cell(c)
		require.Empty(t, v, c)
		require.NotEmpty(t, missing, c)
	}
	for _, c := range []string{"0", "Enabled", "No"} {
		v, missing := smi.Cell(c)
		require.Equal(t, c, v)
		require.Empty(t, missing, c)
	}
}

func TestExitError(t *testing.T) {
	e := &smi.ExitError{Args: []string{"--gpu-reset", "-i", "GPU-a"}, Result: toolexec.Result{ExitCode: 15, Stderr: []byte("Unable to determine the device handle for GPU0000:91:00.0: Unknown Error\n\n")}}
	require.Equal(t, "nvidia-smi --gpu-reset -i GPU-a: exit 15 (a GPU has fallen off the bus): Unable to determine the device handle for GPU0000:91:00.0: Unknown Error", e.Error())
}

const (
	qHealth = "--query-gpu=index,uuid,pci.bus_id,ecc.errors.uncorrected.volatile.total --format=csv,noheader,nounits -i GPU-a"
	qRemap  = "--query-remapped-rows=gpu_uuid,remapped_rows.correctable,remapped_rows.uncorrectable,remapped_rows.pending,remapped_rows.failure --format=csv,noheader,nounits"
	// oldDriver is how a driver without the remapped_rows.* fields of
	// --query-gpu refuses a query that names one: the whole query fails.
	oldDriver = "Field \"remapped_rows.pending\" is not a valid field to query.\n"
)

func TestQueryHealth(t *testing.T) {
	cases := map[string]struct {
		out, remap string
		healthy    bool
		problems   []string
		notes      []string
	}{
		"healthy":              {"0, GPU-a, 00000000:3B:00.0, 0\n", "GPU-a, 0, 0, No, No\n", true, nil, nil},
		"fields not supported": {"0, GPU-a, 00000000:3B:00.0, [N/A]\n", "GPU-a, [N/A], [N/A], [N/A], [Not Supported]\n", true, nil, []string{"row remapping not checked: not available on this GPU (nvidia-smi reports [N/A])"}},
		"everything wrong": {"0, GPU-a, 00000000:3B:00.0, 2\n", "GPU-b, 0, 0, No, No\nGPU-a, 0, 3, Yes, Yes\n", false, []string{
			"uncorrectable volatile ECC errors: 2", "a row remap is still pending", "a row remap has failed: the GPU needs replacing"}, nil},
		"another GPU answers": {"1, GPU-b, 00000000:86:00.0, 0\n", "GPU-b, 0, 0, No, No\n", false, []string{"nvidia-smi no longer lists it"}, nil},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			tool := gputest.NewFakeTool(t, "nvidia-smi").On(qHealth, tc.out, 0).On(qRemap, tc.remap, 0)
			h, err := smi.Tool{Path: tool.Path}.QueryHealth(context.Background(), "GPU-a")
			require.NoError(t, err)
			require.Equal(t, tc.healthy, h.Healthy)
			require.Equal(t, tc.problems, h.Problems)
			require.Equal(t, tc.notes, h.Notes)
		})
	}
}

// The health after a reset asks for the remapped rows the way the
// inventory does (--query-remapped-rows, on its own), so a driver that does
// not know the remapped_rows.* fields of --query-gpu still answers for the
// GPU; that it cannot say is a note, not a problem.
func TestQueryHealthOnADriverWithoutRemappedRowsFields(t *testing.T) {
	tool := gputest.NewFakeTool(t, "nvidia-smi").
		On(qHealth, "0, GPU-a, 00000000:3B:00.0, 0\n", 0).
		On(qRemap, oldDriver, 2).
		On("--query-gpu=index,uuid,pci.bus_id,ecc.errors.uncorrected.volatile.total,remapped_rows.pending,remapped_rows.failure --format=csv,noheader,nounits -i GPU-a", oldDriver, 2)
	h, err := smi.Tool{Path: tool.Path}.QueryHealth(context.Background(), "GPU-a")
	require.NoError(t, err)
	require.True(t, h.Healthy, h.Problems)
	require.Equal(t, "00000000:3B:00.0", h.BusID)
	require.Equal(t, []string{`row remapping not checked: nvidia-smi failed (exit 2): Field "remapped_rows.pending" is not a valid field to query.`}, h.Notes)
	require.Equal(t, []string{qHealth, qRemap}, tool.Calls())
}

func TestQueryPersistence(t *testing.T) {
	const q = "--query-gpu=uuid,persistence_mode --format=csv,noheader,nounits -i GPU-a"
	tool := gputest.NewFakeTool(t, "nvidia-smi").On(q, "GPU-a, Enabled\n", 0)
	on, err := smi.Tool{Path: tool.Path}.QueryPersistence(context.Background(), "GPU-a")
	require.NoError(t, err)
	require.True(t, on)
	tool.On(q, "GPU-a, [N/A]\n", 0)
	_, err = smi.Tool{Path: tool.Path}.QueryPersistence(context.Background(), "GPU-a")
	require.ErrorContains(t, err, `persistence mode of GPU-a reads "[N/A]"`)
}

func TestQueryGPUsNeedsAWellFormedRow(t *testing.T) {
	const q = "--query-gpu=index,uuid,pci.bus_id --format=csv,noheader,nounits"
	tool := gputest.NewFakeTool(t, "nvidia-smi").On(q, "", 0)
	_, err := smi.Tool{Path: tool.Path}.QueryGPUs(context.Background())
	require.ErrorContains(t, err, "no GPU rows")
	tool.OnErr(q, "", "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n", 9)
	_, err = smi.Tool{Path: tool.Path}.QueryGPUs(context.Background())
	require.ErrorContains(t, err, "exit 9 (the NVIDIA driver is not loaded)")
}

func TestRunTimeoutKillsTheGroup(t *testing.T) {
	tool := gputest.NewFakeTool(t, "nvidia-smi").Hang("-q")
	out, err := smi.Tool{Path: tool.Path, Timeout: 300 * time.Millisecond}.Run(context.Background(), "-q")
	require.ErrorIs(t, err, toolexec.ErrTimeout)
	require.Equal(t, -1, out.ExitCode)
	require.True(t, strings.HasPrefix(err.Error(), tool.Path+" -q: "))
	child := tool.HangChild()
	require.NotZero(t, child)
	testutil.WaitFor(t, 10*time.Second, "the hang's child to be killed with its group", func() bool { return gputest.Gone(child) })
}

func FuzzReadRows(f *testing.F) {
	f.Add("0, GPU-a, 00000000:3B:00.0\n1, GPU-b, 00000000:86:00.0\n", 3)
	f.Add("No running processes found\n", 3)
	f.Add("GPU-a, 4242, 1024\n", 3)
	f.Add("0, GPU-a, 00000000:3B:00.0, [N/A], No, [Not Supported]\n", 6)
	f.Fuzz(func(t *testing.T, text string, fields int) {
		if fields < 1 || fields > 64 {
			return
		}
		names := make([]string, fields)
		for i := range names {
			names[i] = "f" + strconv.Itoa(i)
		}
		rows, err := smi.ReadRows([]byte(text), names)
		if err != nil {
			return
		}
		for _, r := range rows {
			if len(r) != fields {
				t.Fatalf("row %q has %d cells, want %d", r, len(r), fields)
			}
			for _, c := range r {
				if c != strings.TrimSpace(c) {
					t.Fatalf("cell %q is not trimmed", c)
				}
			}
		}
	})
}
