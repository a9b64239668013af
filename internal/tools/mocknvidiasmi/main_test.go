package main_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/internal/testutil"
	"github.com/better-compute/commands/plugins/gpureset"
	"github.com/better-compute/commands/plugins/nvml"
	"github.com/better-compute/commands/sdk/kind"
	"github.com/better-compute/commands/sdk/kindtest"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testutil.CleanupBuilds()
	os.Exit(code)
}

// host is bcd's host service for the plugins: the inventory the nvml
// plugin stores, and no node spec (no hold names a GPU).
type host struct{ inv json.RawMessage }

func (h *host) Inventory(context.Context) (json.RawMessage, time.Time, error) {
	return h.inv, time.Time{}, nil
}
func (h *host) PutInventory(_ context.Context, inv json.RawMessage) error {
	h.inv = append(json.RawMessage(nil), inv...)
	return nil
}
func (h *host) NodeSpec(context.Context) (int64, json.RawMessage, error) { return 1, nil, nil }
func (h *host) Conditions(context.Context) ([]kind.Condition, error)     { return nil, nil }
func (h *host) Journal(context.Context, int) ([]json.RawMessage, error)  { return nil, nil }

// inventoryGPU is what the test reads of an inventory's GPU.
type inventoryGPU struct {
	Index        int    `json:"index"`
	UUID         string `json:"uuid"`
	RemappedRows *struct {
		Uncorrectable int  `json:"uncorrectable"`
		Pending       bool `json:"pending"`
	} `json:"remappedRows"`
	ECC *struct {
		UncorrectableVolatile *uint64 `json:"uncorrectableVolatile"`
	} `json:"ecc"`
}

func refresh(ctx context.Context, t *testing.T, p *kindtest.Plugin) []inventoryGPU {
	t.Helper()
	res, err := p.Execute(ctx, "inventory.refresh", json.RawMessage(`{"sections":["gpus"]}`), nil)
	require.NoError(t, err)
	require.Equal(t, kind.StatusSucceeded, res.Status, res.Message)
	var inv struct {
		GPUs []inventoryGPU `json:"gpus"`
	}
	require.NoError(t, json.Unmarshal(res.Data, &inv))
	require.Len(t, inv.GPUs, 8)
	return inv.GPUs
}

// The demo's node, out of process as bcd runs it: the nvml plugin and
// gpu.reset's plugin share one pluginEnv, with BCD_NVIDIA_SMI pointing at
// the mock nvidia-smi and the mock GPUs kept in BCD_NVML_MOCK_STATE. The
// inventory shows GPU 3's pending row remap; gpu.reset, through the mock
// nvidia-smi, turns persistence mode off, resets GPU 3, turns it back on,
// and finds the GPU healthy; the nvml plugin's next inventory (the same
// process, which read the state before the reset) shows the remap no
// longer pending, with GPU 5's ECC errors, which no reset touched, still
// there. Nothing else cleared the fault: only the reset wrote the file.
func TestGPUResetThroughTheMockClearsTheFaultTheInventoryShows(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// Built first: a plugin's host service waits 5 s for its first call.
	smiBin := testutil.BuildBinary(t, "./internal/tools/mocknvidiasmi")
	nvmlBin := testutil.BuildBinary(t, "./plugins/nvml/cmd/bc-kind-nvml")
	resetBin := testutil.BuildBinary(t, "./plugins/gpureset/cmd/bc-kind-gpureset")
	dir := t.TempDir()
	kmsg := filepath.Join(dir, "kmsg")
	require.NoError(t, os.WriteFile(kmsg, nil, 0o600))
	bootID := filepath.Join(dir, "root", "proc", "sys", "kernel", "random", "boot_id")
	require.NoError(t, os.MkdirAll(filepath.Dir(bootID), 0o755))
	require.NoError(t, os.WriteFile(bootID, []byte("boot-1\n"), 0o600))
	env := []string{
		nvml.EnvNVML + "=mock:dgxh200",
		nvml.EnvNVMLFaults + "=gpu=3:row-remap-pending,gpu=5:ecc-uncorrectable=2",
		nvml.EnvNVMLMockState + "=" + filepath.Join(dir, "gpus.json"),
		nvml.EnvNvidiaSmi + "=" + smiBin,
		nvml.EnvKmsgPath + "=" + kmsg,
		nvml.EnvSysRoot + "=" + filepath.Join(dir, "root"),
		nvml.EnvStateDir + "=" + filepath.Join(dir, "state"),
	}
	h := &host{}
	inv := kindtest.Start(t, nvmlBin, kindtest.Options{Env: env, Host: h})
	before := refresh(ctx, t, inv)
	require.True(t, before[3].RemappedRows.Pending)
	require.Equal(t, uint64(2), *before[5].ECC.UncorrectableVolatile)

	reset := kindtest.Start(t, resetBin, kindtest.Options{Env: env, Host: h})
	res, err := reset.Execute(ctx, "gpu.reset", json.RawMessage(`{"gpus":["`+before[3].UUID+`"]}`), nil)
	require.NoError(t, err)
	require.Equal(t, kind.StatusSucceeded, res.Status, "%s %s: %s", res.Reason, res.Message, res.Data)
	var r gpureset.Result
	require.NoError(t, json.Unmarshal(res.Data, &r))
	require.Len(t, r.GPUs, 1)
	got := r.GPUs[0]
	require.Equal(t, gpureset.GPUResult{UUID: before[3].UUID, BusID: "00000000:48:00.0", PersistenceMode: "enabled", PersistenceRestored: true,
		Reset: gpureset.ResetOK, Healthy: true, XIDsCleared: true}, got)

	after := refresh(ctx, t, inv)
	require.Equal(t, before[3].UUID, after[3].UUID)
	require.False(t, after[3].RemappedRows.Pending, "the fresh inventory shows the fault gone")
	require.Equal(t, 1, after[3].RemappedRows.Uncorrectable)
	require.Equal(t, uint64(2), *after[5].ECC.UncorrectableVolatile, "GPU 5 was not reset")
}
