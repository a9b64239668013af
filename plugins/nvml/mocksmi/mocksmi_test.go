package mocksmi

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/internal/testutil"
	"github.com/better-compute/commands/plugins/internal/gpu/smi"
	"github.com/better-compute/commands/plugins/nvml"
	"github.com/better-compute/commands/plugins/nvml/nvmldriver"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testutil.CleanupBuilds()
	os.Exit(code)
}

// tool builds the mock nvidia-smi and sets the environment bcd would give
// the plugin that runs it: a mock dgxh200 with the demo's faults, kept in
// a state file. It returns the tool as the GPU kinds run nvidia-smi.
func tool(t *testing.T) (smi.Tool, string) {
	t.Helper()
	state := filepath.Join(t.TempDir(), "gpus.json")
	t.Setenv(nvml.EnvNVML, "mock:dgxh200")
	t.Setenv(nvml.EnvNVMLFaults, "gpu=3:row-remap-pending,gpu=5:ecc-uncorrectable=2")
	t.Setenv(nvml.EnvNVMLMockState, state)
	return smi.Tool{Path: testutil.BuildBinary(t, "./internal/tools/mocknvidiasmi"), Timeout: 30 * time.Second}, state
}

// "The mock GPUs need a mock nvidia-smi that resets a mock GPU and clears
// its injected fault, behind the same interface the real tool uses": the
// mock, run as a process through the smi package that gpu.reset uses,
// lists the GPUs, reports GPU 3's pending row remap, refuses a reset while
// persistence mode holds the GPU, resets it once that is off, and its
// fresh health query, and the nvml plugin's mock source reading the same
// state file, show the remap no longer pending; GPU 5's ECC errors, not
// reset, stay.
func TestMockNvidiaSmiResetsAMockGPUThroughTheSmiPackage(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	tl, state := tool(t)

	gpus, err := tl.QueryGPUs(ctx)
	require.NoError(t, err)
	require.Len(t, gpus, 8)
	require.Equal(t, "00000000:48:00.0", gpus[3].BusID)
	uuid := gpus[3].UUID

	ans := tl.Query(ctx)
	require.True(t, ans.Status.Answered, ans.Status.Reason)
	require.True(t, ans.GPUs[3].RemappedRows.Pending)
	require.Equal(t, uint64(2), *ans.GPUs[5].ECC.UncorrectableVolatile)
	h, err := tl.QueryHealth(ctx, uuid)
	require.NoError(t, err)
	require.False(t, h.Healthy)
	require.Equal(t, []string{"a row remap is still pending"}, h.Problems)

	on, err := tl.QueryPersistence(ctx, uuid)
	require.NoError(t, err)
	require.True(t, on)
	err = tl.ResetGPU(ctx, uuid)
	var exit *smi.ExitError
	require.True(t, errors.As(err, &exit), "%v", err)
	require.True(t, smi.IsInUse(exit.Result.Stdout), "%s", exit.Result.Stdout)
	ans = tl.Query(ctx)
	require.True(t, ans.GPUs[3].RemappedRows.Pending, "a refused reset changes nothing")

	require.NoError(t, tl.SetPersistence(ctx, uuid, false))
	require.NoError(t, tl.ResetGPU(ctx, uuid))
	require.NoError(t, tl.SetPersistence(ctx, uuid, true))
	h, err = tl.QueryHealth(ctx, uuid)
	require.NoError(t, err)
	require.True(t, h.Healthy, "%v", h.Problems)

	d, err := nvmldriver.OpenState("mock:dgxh200", "", state)
	require.NoError(t, err)
	defer d.Close()
	gs, st, _ := d.Snapshot(ctx)
	require.True(t, st.Answered, st.Reason)
	require.Equal(t, uuid, gs[3].UUID)
	require.False(t, gs[3].RemappedRows.Pending)
	require.Equal(t, 1, gs[3].RemappedRows.Uncorrectable, "the remapped row stays counted")
	require.True(t, *gs[3].PersistenceMode)
	require.Equal(t, uint64(2), *gs[5].ECC.UncorrectableVolatile)
}

// The mock answers for mock GPUs only, and an action without a state file
// fails rather than claim a change it could not keep.
func TestMockNvidiaSmiRefusesWhatItCannotDo(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	tl, _ := tool(t)
	gpus, err := tl.QueryGPUs(ctx)
	require.NoError(t, err)

	res, err := tl.Run(ctx, "--gpu-reset", "-i", "GPU-00000000-0000-0000-0000-000000000000")
	require.NoError(t, err)
	require.Equal(t, smi.ExitNotFound, res.ExitCode)
	require.Equal(t, "No devices were found\n", string(res.Stdout))

	t.Setenv(nvml.EnvNVMLMockState, "")
	err = tl.ResetGPU(ctx, gpus[3].UUID)
	var exit *smi.ExitError
	require.True(t, errors.As(err, &exit), "%v", err)
	require.Equal(t, smi.ExitOther, exit.Result.ExitCode)
	require.Contains(t, string(exit.Result.Stderr), "needs BCD_NVML_MOCK_STATE")

	res, err = tl.Run(ctx, "--query-gpu=uuid,clocks.sm", "--format=csv")
	require.NoError(t, err)
	require.Equal(t, smi.ExitInvalidArgument, res.ExitCode)
	require.Equal(t, "Field \"clocks.sm\" is not a valid field to query.\n", string(res.Stderr))

	t.Setenv(nvml.EnvNVML, "nvml")
	_, err = tl.QueryGPUs(ctx)
	require.ErrorContains(t, err, "not a mock source such as mock:dgxh200: it answers for mock GPUs only")
}
