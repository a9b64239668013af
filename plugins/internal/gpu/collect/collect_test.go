package collect

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/plugins/internal/gpu"
	"github.com/better-compute/commands/plugins/internal/gpu/gputest"
	"github.com/better-compute/commands/plugins/internal/gpu/smi"
	"github.com/better-compute/commands/plugins/internal/gpu/sysview"
	"github.com/better-compute/commands/plugins/internal/gpu/xid"
)

// fakeNVML is an NVML source with fixed answers: the real driver is tested
// with go-nvml's mocks in plugins/nvml/nvmldriver.
type fakeNVML struct {
	gpus []gpu.GPU
	st   gpu.SourceStatus
}

func (f fakeNVML) Snapshot(context.Context) ([]gpu.GPU, gpu.SourceStatus, string) {
	out := make([]gpu.GPU, len(f.gpus))
	copy(out, f.gpus)
	return out, f.st, "550.54.15"
}

func nvmlGPU(i int) gpu.GPU {
	g := gpu.GPU{Index: i, UUID: gputest.UUID(i), BusID: gputest.BusID(i), Name: "NVIDIA H100 80GB HBM3",
		ECC: &gpu.ECC{Enabled: gpu.Ptr(true), UncorrectableVolatile: gpu.Ptr(uint64(0))}, PCIe: &gpu.PCIe{WidthCurrent: 16, WidthMax: 16, WidthSamples: []int{16}}}
	g.Seen(gpu.SourceNVML)
	// NVML cannot read the remapped rows of this GPU; nvidia-smi can.
	g.Skip(gpu.FieldRemappedRows, "NVML reports NOT_SUPPORTED for this GPU")
	g.Skip(gpu.FieldPersistenceMode, "NVML reports NOT_SUPPORTED for this GPU")
	return g
}

func TestCollectMergesTheSourcesByBusID(t *testing.T) {
	root := gputest.NewRoot(t, "boot-1")
	root.AddHealthyGPUs(2)
	rows := gputest.HealthyGPUs(2)
	rows[1].WidthCurrent = "8"
	fake := gputest.NewSmi(t, gputest.Answer(rows))
	kmsg := gputest.WriteKmsg(t, t.TempDir(), gputest.KmsgRecords([]string{
		"NVRM: Xid (PCI:" + gputest.BusID(1) + "): 48, pid='<unknown>', name=<unknown>, DBE",
		"NVRM: Xid (PCI:0000:99:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.",
	}, 1))
	c := &Collector{
		Kernel:    sysview.View{Root: root.Dir},
		NVML:      fakeNVML{gpus: []gpu.GPU{nvmlGPU(0), nvmlGPU(1)}, st: gpu.SourceStatus{Answered: true, GPUs: 2}},
		SMI:       smi.Tool{Path: fake.Path, Timeout: 10 * time.Second},
		KmsgPath:  kmsg,
		StorePath: filepath.Join(t.TempDir(), xid.StoreFile),
		Now:       func() time.Time { return time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC) },
	}
	inv, err := c.Collect(context.Background(), Options{})
	require.NoError(t, err)
	require.Equal(t, gpu.SchemaVersion, inv.SchemaVersion)
	require.Equal(t, "boot-1", inv.BootID)
	require.Equal(t, "550.54.15", inv.DriverVersion)
	require.Equal(t, time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), inv.CollectedAt)
	require.True(t, inv.Sources.NVML.Answered)
	require.True(t, inv.Sources.NvidiaSmi.Answered)
	require.True(t, inv.Sources.Kernel.Answered)
	require.True(t, inv.Sources.Kmsg.Answered)
	require.Len(t, inv.GPUs, 2)

	g := inv.GPUs[1]
	require.Equal(t, 1, g.Index)
	require.Equal(t, gputest.BusID(1), g.BusID)
	require.Equal(t, []string{gpu.SourceNVML, gpu.SourceNvidiaSmi, gpu.SourceKernel}, g.SeenBy)
	require.Equal(t, true, *g.PersistenceMode, "nvidia-smi filled what NVML skipped")
	require.Equal(t, &gpu.RemappedRows{}, g.RemappedRows)
	require.Nil(t, g.Skipped, "no skip stays once a source reported the field")
	require.Equal(t, []int{16, 8}, g.PCIe.WidthSamples, "NVML's sample, then nvidia-smi's")
	require.Equal(t, 16, g.PCIe.SysfsWidthCurrent)
	require.Len(t, g.XIDs, 1)
	require.Equal(t, 48, g.XIDs[0].XID)
	require.Len(t, inv.UnmatchedXIDs, 1)
	require.Equal(t, 79, inv.UnmatchedXIDs[0].XID)
	require.Equal(t, 1, inv.Sources.Kmsg.GPUs)
}

func TestCollectWhenOnlyTheKernelNamesTheGPUs(t *testing.T) {
	root := gputest.NewRoot(t, "boot-1")
	root.AddHealthyGPUs(2)
	fake := gputest.NewSmi(t, gputest.SmiAnswer{GPUOut: "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n", GPUExit: 9})
	c := &Collector{
		Kernel:   sysview.View{Root: root.Dir},
		NVML:     fakeNVML{st: gpu.SourceStatus{Reason: "NVML did not initialise (nvml): ERROR_LIBRARY_NOT_FOUND: libnvidia-ml.so.1 is not installed"}},
		SMI:      smi.Tool{Path: fake.Path},
		KmsgPath: filepath.Join(t.TempDir(), "no-kmsg"),
	}
	inv, err := c.Collect(context.Background(), Options{})
	require.NoError(t, err)
	require.False(t, inv.Sources.NvidiaSmi.Answered)
	require.Equal(t, "the NVIDIA driver is not loaded (nvidia-smi exit 9)", inv.Sources.NvidiaSmi.Reason)
	require.False(t, inv.Sources.NVML.Answered)
	require.Equal(t, gpu.SourceStatus{Answered: true, GPUs: 2}, inv.Sources.Kernel)
	require.False(t, inv.Sources.Kmsg.Answered)
	require.Contains(t, inv.Sources.Kmsg.Reason, "opening kernel log")
	require.Len(t, inv.GPUs, 2)
	require.Equal(t, []string{gpu.SourceKernel}, inv.GPUs[0].SeenBy)
}

func TestCollectCarriesOverUnrequestedSectionsAndRescans(t *testing.T) {
	root := gputest.NewRoot(t, "boot-1")
	root.AddGPU(gputest.KernelGPU{Address: gputest.BusID(0) + ".0", UUID: gputest.UUID(0), WidthCurrent: 4, WidthMax: 16})
	prev := &gpu.Inventory{SchemaVersion: gpu.SchemaVersion, DriverVersion: "1.2.3", GPUs: []gpu.GPU{nvmlGPU(0)}}
	prev.Sources.NVML = gpu.SourceStatus{Answered: true, GPUs: 1}
	c := &Collector{Kernel: sysview.View{Root: root.Dir}, KmsgPath: gputest.WriteKmsg(t, t.TempDir(), "")}
	inv, err := c.Collect(context.Background(), Options{Sections: []string{SectionPCIe, SectionXIDs}, Rescan: true, Previous: prev})
	require.NoError(t, err)
	require.Equal(t, "1.2.3", inv.DriverVersion)
	require.True(t, inv.Sources.NVML.Answered)
	require.Equal(t, 4, inv.GPUs[0].PCIe.SysfsWidthCurrent, "pcie was refreshed from sysfs")
	require.Equal(t, 16, inv.GPUs[0].PCIe.WidthCurrent, "the driver's widths were carried over")
	b, err := os.ReadFile(filepath.Join(root.Dir, "sys", "bus", "pci", "rescan"))
	require.NoError(t, err)
	require.Equal(t, "1", string(b))
}
