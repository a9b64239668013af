package sysview

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/plugins/internal/gpu"
	"github.com/better-compute/commands/plugins/internal/gpu/gputest"
)

func TestKernelViewFromAFakeRoot(t *testing.T) {
	r := gputest.NewRoot(t, "b0a7-boot")
	r.AddGPU(gputest.KernelGPU{Address: "0000:3b:00.0", Model: "NVIDIA H100 80GB HBM3", UUID: "GPU-aaaa", WidthCurrent: 8, WidthMax: 16})
	// The driver is not loaded for this one: only the PCI bus lists it.
	r.AddGPU(gputest.KernelGPU{Address: "0000:18:00.0", NoProc: true, WidthCurrent: 16, WidthMax: 16})
	r.AddPCIDevice("0000:05:00.0", "0x068000") // an NVSwitch
	r.AddPCIDevice("0000:3b:00.1", "0x040300") // the GPU's audio function
	r.SetDriverVersion("535.161.08")
	v := View{Root: r.Dir}

	id, err := v.BootID()
	require.NoError(t, err)
	require.Equal(t, "b0a7-boot", id)
	require.Equal(t, "535.161.08", v.DriverVersion())

	gs, st := v.GPUs()
	require.Equal(t, gpu.SourceStatus{Answered: true, GPUs: 2}, st)
	require.Equal(t, "0000:18:00", gs[0].BusID)
	require.Equal(t, 0, gs[0].Index)
	require.Empty(t, gs[0].UUID)
	require.Equal(t, "0000:3b:00", gs[1].BusID)
	require.Equal(t, 1, gs[1].Index)
	require.Equal(t, "GPU-aaaa", gs[1].UUID)
	require.Equal(t, "NVIDIA H100 80GB HBM3", gs[1].Name)
	require.Equal(t, &gpu.PCIe{SysfsWidthCurrent: 8, SysfsWidthMax: 16, SpeedCurrent: "32.0 GT/s PCIe", SpeedMax: "32.0 GT/s PCIe"}, gs[1].PCIe)
	require.Equal(t, []string{gpu.SourceKernel}, gs[1].SeenBy)
}

func TestKernelViewWithNoGPU(t *testing.T) {
	v := View{Root: t.TempDir()}
	gs, st := v.GPUs()
	require.Empty(t, gs)
	require.Equal(t, gpu.SourceStatus{Reason: "no NVIDIA GPU in /proc/driver/nvidia/gpus or among the PCI devices"}, st)
	_, err := v.BootID()
	require.Error(t, err)
	require.Empty(t, v.DriverVersion())
}
