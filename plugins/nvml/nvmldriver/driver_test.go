package nvmldriver

import (
	"context"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/plugins/internal/gpu"
)

func TestMockDGXH200ReportsEightHealthyGPUs(t *testing.T) {
	d, err := Open("mock:dgxh200", "")
	require.NoError(t, err)
	defer d.Close()
	gs, st, drv := d.Snapshot(context.Background())
	require.Equal(t, gpu.SourceStatus{Answered: true, GPUs: 8}, st)
	require.Equal(t, "550.54.15", drv)
	require.Len(t, gs, 8)
	for i, g := range gs {
		require.Equal(t, i, g.Index)
		require.Regexp(t, `^GPU-[0-9a-f-]{36}$`, g.UUID)
		require.Equal(t, gpu.NormalizeBusID(g.BusID), g.BusID)
		require.Equal(t, "NVIDIA H200 141GB HBM3e", g.Name)
		require.Equal(t, true, *g.PersistenceMode)
		require.Equal(t, &gpu.MIG{Enabled: false}, g.MIG)
		require.Equal(t, true, *g.ECC.Enabled)
		require.Equal(t, uint64(0), *g.ECC.UncorrectableVolatile)
		require.Equal(t, &gpu.RemappedRows{}, g.RemappedRows)
		require.Equal(t, &gpu.PCIe{WidthCurrent: 16, WidthMax: 16, WidthSamples: []int{16}, GenCurrent: 5, GenMax: 5}, g.PCIe)
		require.Nil(t, g.Skipped)
		require.Equal(t, []string{gpu.SourceNVML}, g.SeenBy)
	}
	require.Equal(t, "0000:18:00", gs[0].BusID)
	require.Equal(t, "0000:88:00", gs[7].BusID)
}

func TestEveryMockModelOpens(t *testing.T) {
	for _, m := range MockModels {
		d, err := Open("mock:"+m, "")
		require.NoError(t, err, m)
		_, st, _ := d.Snapshot(context.Background())
		require.True(t, st.Answered, m)
		require.Equal(t, 8, st.GPUs, m)
		d.Close()
	}
}

// Faults injected per test, as from bcd's config for the demo.
func TestFaultsFromConfig(t *testing.T) {
	d, err := Open("mock:dgxh200", "gpu=3:row-remap-pending,gpu=5:ecc-uncorrectable=2,gpu=6:pcie-width=8,gpu=1:row-remap-failure,gpu=2:not-supported=ecc,gpu=4:mig=2,gpu=7:persistence-off")
	require.NoError(t, err)
	defer d.Close()
	gs, _, _ := d.Snapshot(context.Background())
	require.Equal(t, &gpu.RemappedRows{Uncorrectable: 1, Pending: true}, gs[3].RemappedRows)
	require.Equal(t, uint64(2), *gs[5].ECC.UncorrectableVolatile)
	require.Equal(t, uint64(2), *gs[5].ECC.UncorrectableAggregate)
	require.Equal(t, 8, gs[6].PCIe.WidthCurrent)
	require.True(t, gs[1].RemappedRows.Failure)
	require.False(t, *gs[7].PersistenceMode)

	// NOT_SUPPORTED -> skipped with its reason.
	require.Nil(t, gs[2].ECC)
	require.Equal(t, "skipped: NVML reports NOT_SUPPORTED for this GPU", gs[2].SkipReason(gpu.FieldECCErrors))
	require.Equal(t, "skipped: NVML reports NOT_SUPPORTED for this GPU", gs[2].SkipReason(gpu.FieldECCMode))

	// MIG with instances: their UUIDs and parent; remapped rows are not
	// reported for a GPU with MIG instances.
	require.True(t, gs[4].MIG.Enabled)
	require.Len(t, gs[4].MIG.Instances, 2)
	require.Equal(t, gs[4].UUID, gs[4].MIG.Instances[1].ParentUUID)
	require.Regexp(t, `^MIG-`, gs[4].MIG.Instances[1].UUID)
	require.Equal(t, 2, gs[4].MIG.Instances[1].GPUInstanceID)
	require.Nil(t, gs[4].RemappedRows)
	require.Equal(t, "skipped: unknown while MIG mode is on: the driver does not report row remapping of a GPU with active MIG instances (NVML reports NOT_SUPPORTED), although the GPU remaps rows", gs[4].SkipReason(gpu.FieldRemappedRows))
}

func TestBadSourcesAndFaults(t *testing.T) {
	for _, tc := range []struct{ source, faults, err string }{
		{"mock:dgx1", "", `unknown NVML source: no mock server "dgx1" (want one of dgxa100, dgxh100, dgxh200, dgxb200)`},
		{"cuda", "", `unknown NVML source "cuda": want "nvml", "nvml:<library path>" or "mock:<dgxa100|dgxh100|dgxh200|dgxb200>"`},
		{"nvml", "gpu=1:row-remap-pending", "NVML faults can only be injected into a mock source, not the real library"},
		{"mock:dgxh200", "gpu=9:row-remap-pending", "NVML fault on GPU 9: the mock has 8 GPUs"},
		{"mock:dgxh200", "3:row-remap-pending", `NVML fault "3:row-remap-pending": want gpu=<index>:<fault>`},
		{"mock:dgxh200", "gpu=3:melt", `NVML fault "gpu=3:melt": unknown fault "melt"`},
		{"mock:dgxh200", "gpu=3:ecc-uncorrectable", `NVML fault "gpu=3:ecc-uncorrectable": ecc-uncorrectable needs a count, as in ecc-uncorrectable=2`},
		{"mock:dgxh200", "gpu=3:not-supported=fan", `NVML fault "gpu=3:not-supported=fan": not-supported needs ecc, remap or pcie`},
	} {
		_, err := Open(tc.source, tc.faults)
		require.EqualError(t, err, tc.err)
	}
}

// "Init must succeed before ANY other call (after a failed Init a call
// kills the process)": a mock whose only method is Init (every other one
// panics when called) proves the driver calls nothing after a failed Init.
func TestNoCallAfterAFailedInit(t *testing.T) {
	lib := &mock.Interface{InitFunc: func() nvml.Return { return nvml.ERROR_LIBRARY_NOT_FOUND }}
	d := New(lib, "nvml")
	gs, st, drv := d.Snapshot(context.Background())
	require.Empty(t, gs)
	require.Empty(t, drv)
	require.False(t, st.Answered)
	require.Equal(t, "NVML did not initialise (nvml): ERROR_LIBRARY_NOT_FOUND: libnvidia-ml.so.1 is not installed", st.Reason)
	require.Equal(t, st.Reason, d.InitError())
	d.Close() // no Shutdown after a failed Init either
	require.Len(t, lib.InitCalls(), 1)
}

// The real library on a host without it: Init fails cleanly, nothing else
// is called, and the process lives on.
func TestRealLibraryMissing(t *testing.T) {
	d, err := Open("nvml:/nonexistent/libnvidia-ml.so.1", "")
	require.NoError(t, err)
	_, st, _ := d.Snapshot(context.Background())
	require.False(t, st.Answered)
	require.Contains(t, st.Reason, "NVML did not initialise (nvml:/nonexistent/libnvidia-ml.so.1): ERROR_LIBRARY_NOT_FOUND")
	d.Close()
}

// A GPU whose handle NVML cannot get (lost) is left out, not fatal.
func TestLostGPUIsLeftOut(t *testing.T) {
	srv, err := NewMockServer("dgxh100")
	require.NoError(t, err)
	inner := srv.DeviceGetHandleByIndexFunc
	srv.DeviceGetHandleByIndexFunc = func(i int) (nvml.Device, nvml.Return) {
		if i == 2 {
			return nil, nvml.ERROR_GPU_IS_LOST
		}
		return inner(i)
	}
	d := New(srv, "mock:dgxh100")
	gs, st, _ := d.Snapshot(context.Background())
	require.True(t, st.Answered)
	require.Len(t, gs, 7)
	require.Equal(t, 7, st.GPUs)
}

func TestFailuresBecomeSkips(t *testing.T) {
	srv, err := NewMockServer("dgxa100")
	require.NoError(t, err)
	dev := srv.Devices[0].(*server.Device)
	dev.GetCurrPcieLinkWidthFunc = func() (int, nvml.Return) { return 0, nvml.ERROR_UNKNOWN }
	dev.GetPersistenceModeFunc = func() (nvml.EnableState, nvml.Return) { return 0, nvml.ERROR_NOT_SUPPORTED }
	gs, _, _ := New(srv, "mock").Snapshot(context.Background())
	require.Nil(t, gs[0].PCIe)
	require.Equal(t, "skipped: NVML error: ERROR_UNKNOWN", gs[0].SkipReason(gpu.FieldPCIeLink))
	require.Equal(t, "skipped: NVML reports NOT_SUPPORTED for this GPU", gs[0].SkipReason(gpu.FieldPersistenceMode))
}
