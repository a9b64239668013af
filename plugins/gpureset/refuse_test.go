package gpureset_test

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/sdk/kind"
	"github.com/better-compute/commands/sdk/nodespec"
)

// "bcd refuses the whole command gpu-busy while any listed GPU is in use: a
// live hold names it or one of its MIG instances or slots (<uuid> has a live
// assignment), or a VM has it passed through (<uuid> is passed through to
// <instance>)."
func TestRefusesFromTheSpec(t *testing.T) {
	cases := map[string]struct {
		spec   nodespec.Spec
		reason string
	}{
		"a live hold on the GPU": {
			spec:   nodespec.Spec{Holds: []nodespec.Hold{{GPU: gpuA, Allocation: "alloc_1", State: nodespec.HoldLive}}},
			reason: gpuA + " has a live assignment",
		},
		"a live hold on one of its MIG instances": {
			spec:   nodespec.Spec{Holds: []nodespec.Hold{{GPU: gpuA, MIG: "MIG-5c3a2b1d-0e9f-5a8b-9c7d-6e5f4a3b2c1d", State: nodespec.HoldLive}}},
			reason: gpuA + " has a live assignment",
		},
		"a live hold on one of its slots": {
			spec:   nodespec.Spec{Holds: []nodespec.Hold{{GPU: gpuA, Slot: "slot-2", State: nodespec.HoldLive}}},
			reason: gpuA + " has a live assignment",
		},
		"a passthrough to a VM": {
			spec:   nodespec.Spec{Instances: []nodespec.Instance{{Name: "inst_vm7", PassthroughGPUs: []string{gpuA}}}},
			reason: gpuA + " is passed through to inst_vm7",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t)
			e.host.spec = tc.spec
			// Two GPUs listed, one busy: the whole command is refused.
			r, doc := e.run(t, gpuB, gpuA)
			require.Equal(t, kind.StatusFailed, r.Status)
			require.Equal(t, "gpu-busy", r.Reason)
			require.Equal(t, tc.reason, r.Message)
			require.Equal(t, []string{tc.reason}, doc.Busy)
			require.Equal(t, int64(7), doc.SpecGeneration)
			// Refused from the spec alone: nvidia-smi never ran.
			require.Empty(t, e.smi.Calls())
		})
	}
}

func TestReleasedHoldDoesNotRefuse(t *testing.T) {
	e := newEnv(t)
	e.host.spec = nodespec.Spec{Holds: []nodespec.Hold{{GPU: gpuA, State: nodespec.HoldReleased}}}
	r, _ := e.run(t, gpuA)
	require.Equal(t, kind.StatusSucceeded, r.Status, r.Message)
}

// "Also refuse when a process holds the device."
func TestRefusesWhenAProcessUsesTheGPU(t *testing.T) {
	t.Run("a compute process nvidia-smi reports", func(t *testing.T) {
		e := newEnv(t)
		e.smi.On(qApps, gpuA+", 4242, 1024\n", 0)
		r, doc := e.run(t, gpuA, gpuB)
		require.Equal(t, "gpu-busy", r.Reason)
		require.Equal(t, gpuA+" is used by process 4242", r.Message)
		require.Equal(t, []string{gpuA + " is used by process 4242"}, doc.Busy)
		require.Empty(t, e.resetCalls())
	})
	t.Run("a process with the device node open", func(t *testing.T) {
		e := newEnv(t)
		writeDriverInfo(t, e.proc, "0000:86:00.0", 3, gpuB)
		writeHolder(t, e.proc, 1234, "python3", "/dev/nvidia3")
		writeHolder(t, e.proc, 1300, "bash", "/dev/nvidiactl") // names no GPU
		r, _ := e.run(t, gpuA, gpuB)
		require.Equal(t, "gpu-busy", r.Reason)
		require.Equal(t, gpuB+" is held open by process 1234 (python3)", r.Message)
		require.Empty(t, e.resetCalls())
	})
	t.Run("a device node whose minor the driver does not map follows the index", func(t *testing.T) {
		e := newEnv(t)
		writeHolder(t, e.proc, 99, "nv-hostengine", "/dev/nvidia0")
		r, _ := e.run(t, gpuA)
		require.Equal(t, "gpu-busy", r.Reason)
		require.Equal(t, gpuA+" is held open by process 99 (nv-hostengine)", r.Message)
	})
}

func writeDriverInfo(t *testing.T, proc, bdf string, minor int, uuid string) {
	t.Helper()
	dir := filepath.Join(proc, "driver", "nvidia", "gpus", bdf)
	require.NoError(t, os.MkdirAll(dir, 0o755))
	info := fmt.Sprintf("Model: \t\t NVIDIA H100 80GB HBM3\nIRQ:   \t\t 305\nGPU UUID: \t %s\nVideo BIOS: \t 96.00.74.00.1c\nBus Type: \t PCIe\nDevice Minor: \t %d\nBus Location: \t %s\n", uuid, minor, bdf)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "information"), []byte(info), 0o644))
}

func writeHolder(t *testing.T, proc string, pid int, comm, dev string) {
	t.Helper()
	dir := filepath.Join(proc, fmt.Sprint(pid))
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "fd"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "comm"), []byte(comm+"\n"), 0o644))
	require.NoError(t, os.Symlink("/dev/null", filepath.Join(dir, "fd", "0")))
	require.NoError(t, os.Symlink(dev, filepath.Join(dir, "fd", "7")))
}

func TestRefusesWithoutTheNodeSpec(t *testing.T) {
	e := newEnv(t)
	e.host.specErr = fmt.Errorf("bcd is restarting")
	r, _ := e.run(t, gpuA)
	require.Equal(t, "node-spec-unavailable", r.Reason)
	require.Empty(t, e.smi.Calls())
}

func TestRefusesAnUnknownGPU(t *testing.T) {
	e := newEnv(t)
	r, _ := e.run(t, "GPU-00000000-0000-0000-0000-000000000000")
	require.Equal(t, "unknown-gpu", r.Reason)
	require.Empty(t, e.resetCalls())
}
