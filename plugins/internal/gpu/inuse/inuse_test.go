package inuse_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/plugins/internal/gpu/inuse"
	"github.com/better-compute/commands/plugins/internal/gpu/smi"
	"github.com/better-compute/commands/sdk/nodespec"
)

const (
	gpuA = "GPU-934a71d6-e50c-86a3-f752-3743a8c1bbb2"
	gpuB = "GPU-1f2e3d4c-5b6a-7988-a7b6-c5d4e3f2a1b0"
)

func TestReasonsInTheSpecsWords(t *testing.T) {
	in := inuse.Input{
		Spec: nodespec.Spec{
			Holds: []nodespec.Hold{
				{GPU: gpuA, MIG: "MIG-5c3a2b1d-0e9f-5a8b-9c7d-6e5f4a3b2c1d", State: nodespec.HoldLive},
				{GPU: gpuB, State: nodespec.HoldReleased},
			},
			Instances: []nodespec.Instance{{Name: "inst_vm3", PassthroughGPUs: []string{gpuB}}},
		},
		Apps: []smi.ComputeApp{{GPU: gpuA, PID: 1}},
	}
	// The spec's reason wins over a process on the same GPU.
	require.Equal(t, []string{gpuA + " has a live assignment", gpuB + " is passed through to inst_vm3"}, inuse.Reasons(in, []string{gpuA, gpuB}))
	require.Nil(t, inuse.Reasons(inuse.Input{}, []string{gpuA}))
}

func TestReasonsForAHoldNamingOnlyAMIGDevice(t *testing.T) {
	// Older drivers name MIG devices "MIG-GPU-<uuid>/<gi>/<ci>".
	in := inuse.Input{Spec: nodespec.Spec{Holds: []nodespec.Hold{{GPU: "MIG-" + gpuA + "/1/0", State: nodespec.HoldLive}}}}
	require.Equal(t, []string{gpuA + " has a live assignment"}, inuse.Reasons(in, []string{gpuA}))
}

func TestReasonsForProcesses(t *testing.T) {
	in := inuse.Input{
		Apps:    []smi.ComputeApp{{GPU: gpuB, PID: 4242}, {GPU: gpuB, PID: 4243}},
		Holders: []inuse.Holder{{PID: 77, Comm: "python3", Device: "/dev/nvidia0", GPU: gpuA}},
	}
	require.Equal(t, []string{
		gpuA + " is held open by process 77 (python3)",
		gpuB + " is used by process 4242",
		gpuB + " is used by process 4243",
	}, inuse.Reasons(in, []string{gpuA, gpuB}))
}

func TestScanHolders(t *testing.T) {
	proc := t.TempDir()
	info := filepath.Join(proc, "driver", "nvidia", "gpus", "0000:86:00.0")
	require.NoError(t, os.MkdirAll(info, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(info, "information"), []byte("Model: \t\t NVIDIA H100\nGPU UUID: \t "+gpuB+"\nDevice Minor: \t 1\n"), 0o644))
	holder := func(pid, comm string, devs ...string) {
		dir := filepath.Join(proc, pid)
		require.NoError(t, os.MkdirAll(filepath.Join(dir, "fd"), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(dir, "comm"), []byte(comm+"\n"), 0o644))
		for i, d := range devs {
			require.NoError(t, os.Symlink(d, filepath.Join(dir, "fd", string(rune('3'+i)))))
		}
	}
	holder("100", "python3", "/dev/nvidia1", "/dev/nvidia1", "/dev/nvidiactl", "/dev/nvidia-uvm")
	holder("200", "nv-hostengine", "/dev/nvidia0")
	holder("300", "train", "/dev/nvidia0")
	holder("400", "self", "/dev/nvidia0")
	require.NoError(t, os.MkdirAll(filepath.Join(proc, "self"), 0o755))

	require.Equal(t, map[int]string{1: gpuB}, inuse.Minors(proc))
	got := inuse.ScanHolders(proc, inuse.ScanOptions{
		Minors:     inuse.Minors(proc),
		ByIndex:    map[int]string{0: gpuA},
		IgnoreComm: []string{"nv-hostengine"},
		SkipPID:    400,
	})
	require.Equal(t, []inuse.Holder{
		{PID: 100, Comm: "python3", Device: "/dev/nvidia1", GPU: gpuB},
		{PID: 300, Comm: "train", Device: "/dev/nvidia0", GPU: gpuA},
	}, got)
	require.Nil(t, inuse.ScanHolders(filepath.Join(proc, "missing"), inuse.ScanOptions{}))
}
