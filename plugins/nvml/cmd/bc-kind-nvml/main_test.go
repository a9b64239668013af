package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/internal/testutil"
	"github.com/better-compute/commands/plugins/internal/gpu"
	"github.com/better-compute/commands/plugins/internal/gpu/gputest"
	"github.com/better-compute/commands/plugins/nvml"
	"github.com/better-compute/commands/plugins/nvml/manifest"
	"github.com/better-compute/commands/sdk/kind"
	"github.com/better-compute/commands/sdk/kindtest"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testutil.CleanupBuilds()
	os.Exit(code)
}

const pkg = "./plugins/nvml/cmd/bc-kind-nvml"

// env is the allowlisted environment bcd would pass for a mock node.
func env(t *testing.T, faults string) []string {
	root := gputest.NewRoot(t, "boot-1")
	dir := t.TempDir()
	return []string{
		nvml.EnvNVML + "=mock:dgxh200",
		nvml.EnvNVMLFaults + "=" + faults,
		nvml.EnvNvidiaSmi + "=mock",
		nvml.EnvKmsgPath + "=" + gputest.WriteKmsg(t, dir, gputest.KmsgRecords([]string{"NVRM: Xid (PCI:0000:18:00): 13, pid=1, name=python, Graphics SM Warp Exception"}, 1)),
		nvml.EnvSysRoot + "=" + root.Dir,
		nvml.EnvStateDir + "=" + filepath.Join(dir, "state"),
		nvml.EnvExpectedGPUs + "=8",
	}
}

// memHost is bcd's host service for the plugin under test.
type memHost struct {
	inv  json.RawMessage
	puts chan json.RawMessage
}

func (h *memHost) Inventory(context.Context) (json.RawMessage, time.Time, error) {
	return h.inv, time.Time{}, nil
}
func (h *memHost) PutInventory(_ context.Context, inv json.RawMessage) error {
	select {
	case h.puts <- append(json.RawMessage(nil), inv...):
	default:
	}
	return nil
}
func (h *memHost) NodeSpec(context.Context) (int64, json.RawMessage, error) { return 0, nil, nil }
func (h *memHost) Conditions(context.Context) ([]kind.Condition, error)     { return nil, nil }
func (h *memHost) Journal(context.Context, int) ([]json.RawMessage, error)  { return nil, nil }

func TestConformance(t *testing.T) {
	bin := testutil.BuildBinary(t, pkg)
	// nvidia-smi hangs (a fake whose queries wait until killed), so a
	// refresh runs until cancelled, as on a node whose driver is wedged.
	smi := gputest.NewSmi(t, gputest.SmiAnswer{Hang: true})
	refresh := kindtest.Case{Kind: manifest.KindInventoryRefresh, Payload: json.RawMessage(`{}`)}
	kindtest.Run(t, bin, kindtest.Options{
		Kinds:       []string{manifest.KindInventoryRefresh, manifest.KindDiagNVML},
		Env:         append(env(t, ""), nvml.EnvNvidiaSmi+"="+smi.Path),
		Host:        &memHost{puts: make(chan json.RawMessage, 4)},
		LongRunning: &refresh,
		InjectPanic: &refresh,
	})
	testutil.WaitFor(t, 10*time.Second, "the cancelled refresh's nvidia-smi to be killed", func() bool { return gputest.Gone(smi.HangChild()) })
}

// The plugin binary, out of process as bcd runs it, on go-nvml's dgxh200
// mock with faults from config: inventory.refresh stores eight GPUs in bcd,
// and diag.nvml fails naming the faulty GPUs.
func TestMockDGXH200WithFaultsOutOfProcess(t *testing.T) {
	bin := testutil.BuildBinary(t, pkg)
	host := &memHost{puts: make(chan json.RawMessage, 4)}
	p := kindtest.Start(t, bin, kindtest.Options{
		Env:  env(t, "gpu=3:row-remap-pending,gpu=5:ecc-uncorrectable=2"),
		Host: host,
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	res, err := p.Execute(ctx, manifest.KindInventoryRefresh, json.RawMessage(`{"sections":["gpus","xids"]}`), nil)
	require.NoError(t, err)
	require.Equal(t, kind.StatusSucceeded, res.Status, res.Message)
	var inv gpu.Inventory
	require.NoError(t, json.Unmarshal(res.Data, &inv))
	require.Len(t, inv.GPUs, 8)
	require.True(t, inv.Sources.NVML.Answered)
	require.True(t, inv.Sources.NvidiaSmi.Answered)
	require.True(t, inv.GPUs[3].RemappedRows.Pending)
	require.True(t, inv.GPUs[0].XIDs[0].Ignored)
	select {
	case stored := <-host.puts:
		require.JSONEq(t, string(res.Data), string(stored))
	case <-ctx.Done():
		t.Fatal("inventory.refresh did not update bcd's inventory")
	}

	res, err = p.Execute(ctx, manifest.KindDiagNVML, json.RawMessage(`{}`), nil)
	require.NoError(t, err)
	require.Equal(t, kind.StatusFailed, res.Status)
	require.Equal(t, nvml.ReasonChecksFailed, res.Reason)
	var rep nvml.Report
	require.NoError(t, json.Unmarshal(res.Data, &rep))
	var failed []string
	for _, c := range rep.Failed() {
		failed = append(failed, c.Check+" "+c.GPU.BusID)
	}
	require.Equal(t, []string{"row-remap.pending 0000:48:00", "ecc.uncorrectable 0000:68:00"}, failed)
}

// Without libnvidia-ml the plugin does not die: NVML's Init failed, nothing
// else is called, and diag.nvml says why.
func TestRealNVMLMissingOutOfProcess(t *testing.T) {
	bin := testutil.BuildBinary(t, pkg)
	e := env(t, "")
	e[0] = nvml.EnvNVML + "=nvml:/nonexistent/libnvidia-ml.so.1"
	e[2] = nvml.EnvNvidiaSmi + "=" + filepath.Join(t.TempDir(), "nvidia-smi")
	p := kindtest.Start(t, bin, kindtest.Options{Env: e})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := p.Execute(ctx, manifest.KindDiagNVML, json.RawMessage(`{}`), nil)
	require.NoError(t, err)
	require.Equal(t, kind.StatusFailed, res.Status)
	var rep nvml.Report
	require.NoError(t, json.Unmarshal(res.Data, &rep))
	require.Equal(t, "nvidia-smi did not answer: nvidia-smi is not installed (not found)", rep.Checks[0].Reason)
	require.Equal(t, "install the NVIDIA driver utilities (nvidia-smi) on the node", rep.Checks[0].Action)
	require.False(t, p.Exited())
}
