package nvml

import (
	"context"
	"encoding/json"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/plugins/internal/gpu"
	"github.com/better-compute/commands/plugins/internal/gpu/gputest"
	"github.com/better-compute/commands/plugins/internal/gpu/xid"
	"github.com/better-compute/commands/plugins/nvml/manifest"
	"github.com/better-compute/commands/sdk/kind"
)

// memHost is bcd's host service as far as these kinds use it.
type memHost struct {
	lock sync.Mutex
	inv  json.RawMessage
	puts int
}

func (h *memHost) Inventory(context.Context) (json.RawMessage, time.Time, error) {
	h.lock.Lock()
	defer h.lock.Unlock()
	return h.inv, time.Time{}, nil
}

func (h *memHost) PutInventory(_ context.Context, inv json.RawMessage) error {
	h.lock.Lock()
	defer h.lock.Unlock()
	h.inv = append(json.RawMessage(nil), inv...)
	h.puts++
	return nil
}
func (h *memHost) NodeSpec(context.Context) (int64, json.RawMessage, error) { return 0, nil, nil }
func (h *memHost) Conditions(context.Context) ([]kind.Condition, error)     { return nil, nil }
func (h *memHost) Journal(context.Context, int) ([]json.RawMessage, error)  { return nil, nil }

type node struct {
	root *gputest.Root
	smi  *gputest.Smi
	kmsg string
	p    *Plugin
	host *memHost
}

// newNode is a node with n GPUs that the kernel and a fake nvidia-smi list
// (no NVML: the driver is tested in nvmldriver), and the given kernel log.
func newNode(t *testing.T, n int, smiAnswer gputest.SmiAnswer, kmsg []string) *node {
	root := gputest.NewRoot(t, "boot-1")
	root.AddHealthyGPUs(n)
	return newNodeOn(t, root, smiAnswer, kmsg)
}

// newNodeOn is a node with the kernel's view in root.
func newNodeOn(t *testing.T, root *gputest.Root, smiAnswer gputest.SmiAnswer, kmsg []string) *node {
	fake := gputest.NewSmi(t, smiAnswer)
	dir := t.TempDir()
	nd := &node{root: root, smi: fake, kmsg: gputest.WriteKmsg(t, dir, gputest.KmsgRecords(kmsg, 1)), host: &memHost{}}
	cfg, err := ConfigFromEnv(func(k string) string {
		return map[string]string{
			EnvNvidiaSmi:   fake.Path,
			EnvKmsgPath:    nd.kmsg,
			EnvSysRoot:     root.Dir,
			EnvStateDir:    filepath.Join(dir, "state"),
			EnvExecTimeout: "10s",
		}[k]
	})
	require.NoError(t, err)
	nd.p = &Plugin{Config: cfg}
	return nd
}

func (nd *node) run(t *testing.T, k string, payload string) kind.Result {
	t.Helper()
	var h kind.Handler
	for _, kk := range nd.p.Kinds() {
		if kk.Manifest.Kind == k {
			h = kk.Handler
			v, err := kind.NewValidator(kk.Manifest)
			require.NoError(t, err)
			require.NoError(t, v.Validate([]byte(payload)))
		}
	}
	require.NotNil(t, h)
	return kind.Run(context.Background(), h, kind.Request{
		Command:  kind.Command{ID: "cmd_1", Kind: k, Payload: json.RawMessage(payload)},
		Progress: kind.ProgressFunc(func(int, string) {}),
		Host:     nd.host,
		Logger:   hclog.NewNullLogger(),
	})
}

func TestInventoryRefreshUpdatesBcdsInventoryAndReturnsIt(t *testing.T) {
	nd := newNode(t, 2, gputest.Answer(gputest.HealthyGPUs(2)), []string{
		"NVRM: Xid (PCI:" + gputest.BusID(1) + "): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.",
	})
	res := nd.run(t, manifest.KindInventoryRefresh, `{"sections":["gpus","xids","pcie"],"rescan":false}`)
	require.Equal(t, kind.StatusSucceeded, res.Status, res.Message)
	var inv gpu.Inventory
	require.NoError(t, json.Unmarshal(res.Data, &inv))
	require.Len(t, inv.GPUs, 2)
	require.Equal(t, "boot-1", inv.BootID)
	require.True(t, inv.Sources.NvidiaSmi.Answered)
	require.Equal(t, "NVML is not configured on this node", inv.Sources.NVML.Reason)
	require.Equal(t, 79, inv.GPUs[1].XIDs[0].XID)
	require.Equal(t, gpu.ActionReboot, inv.GPUs[1].XIDs[0].Action)
	require.Equal(t, 1, nd.host.puts)
	require.JSONEq(t, string(res.Data), string(nd.host.inv))

	// The XID store persisted under the state dir: a ring that has since
	// dropped the line still reports it.
	nd2 := newNode(t, 2, gputest.Answer(gputest.HealthyGPUs(2)), nil)
	nd2.p.Config.XIDStore = nd.p.Config.XIDStore
	res = nd2.run(t, manifest.KindInventoryRefresh, `{}`)
	require.NoError(t, json.Unmarshal(res.Data, &inv))
	require.Len(t, inv.GPUs[1].XIDs, 1)
}

func TestDiagNVMLPassesOnAHealthyNode(t *testing.T) {
	nd := newNode(t, 2, gputest.Answer(gputest.HealthyGPUs(2)), nil)
	res := nd.run(t, manifest.KindDiagNVML, `{"expectedCount":2}`)
	require.Equal(t, kind.StatusSucceeded, res.Status, res.Message)
	var rep Report
	require.NoError(t, json.Unmarshal(res.Data, &rep))
	require.Equal(t, StatusPass, rep.Status)
	require.Equal(t, 1, nd.host.puts, "with no inventory in bcd, diag.nvml collected one and stored it")
}

// diag.nvml works from the collected inventory, not from its own calls: with
// an inventory in bcd, it does not run nvidia-smi.
func TestDiagNVMLJudgesTheInventoryBcdHolds(t *testing.T) {
	nd := newNode(t, 2, gputest.Answer(gputest.HealthyGPUs(2)), nil)
	inv := healthy(2)
	inv.GPUs[1].RemappedRows.Pending = true
	raw, err := json.Marshal(inv)
	require.NoError(t, err)
	nd.host.inv = raw
	res := nd.run(t, manifest.KindDiagNVML, `{}`)
	require.Equal(t, kind.StatusFailed, res.Status)
	require.Equal(t, ReasonChecksFailed, res.Reason)
	require.Equal(t, "1 of 13 checks failed; first: row-remap.pending: GPU 1 ("+gputest.UUID(1)+", 0000:28:00) has a row remap pending, which takes effect only after a GPU reset (0 correctable, 0 uncorrectable rows remapped)", res.Message)
	var rep Report
	require.NoError(t, json.Unmarshal(res.Data, &rep), "the report is attached to the failure")
	require.Equal(t, StatusFail, rep.Status)
	require.Empty(t, nd.smi.Calls(), "nvidia-smi was not run")

	// refresh: true collects afresh (nvidia-smi says all is well).
	res = nd.run(t, manifest.KindDiagNVML, `{"refresh":true}`)
	require.Equal(t, kind.StatusSucceeded, res.Status, res.Message)
	require.NotEmpty(t, nd.smi.Calls())
}

func TestDiagNVMLFailsWhenOnlyTheKernelNamesTheGPUs(t *testing.T) {
	nd := newNode(t, 8, gputest.SmiAnswer{GPUOut: "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n", GPUExit: 9}, nil)
	nd.p.Config.ExpectedGPUs = 8
	res := nd.run(t, manifest.KindDiagNVML, `{}`)
	require.Equal(t, kind.StatusFailed, res.Status)
	var rep Report
	require.NoError(t, json.Unmarshal(res.Data, &rep))
	require.Equal(t, "nvidia-smi did not answer: the NVIDIA driver is not loaded (nvidia-smi exit 9); the kernel driver alone names 8 GPUs, which does not prove the driver's management interface works", rep.Checks[0].Reason)
	require.Equal(t, StatusFail, rep.Checks[0].Status)
	require.Equal(t, "0 GPUs visible; this node should have 8", rep.Checks[2].Reason)
}

func TestDiagNVMLExpectedCountFromTheNodesConfig(t *testing.T) {
	nd := newNode(t, 2, gputest.Answer(gputest.HealthyGPUs(2)), nil)
	nd.p.Config.ExpectedGPUs = 4
	res := nd.run(t, manifest.KindDiagNVML, `{}`)
	require.Equal(t, kind.StatusFailed, res.Status)
	require.Contains(t, res.Message, "gpus.count: 2 GPUs visible; this node should have 4")
	// The payload wins over the config.
	res = nd.run(t, manifest.KindDiagNVML, `{"expectedCount":2}`)
	require.Equal(t, kind.StatusSucceeded, res.Status, res.Message)
}

func TestManifestsAreValidAndRefuseBadPayloads(t *testing.T) {
	for _, m := range []kind.Manifest{manifest.InventoryRefreshManifest, manifest.DiagNVMLManifest} {
		require.NoError(t, m.Validate())
		require.True(t, m.APIRunnable)
		require.True(t, m.Flags.RetrySafe)
		require.Equal(t, kind.LaneControl, m.Lane)
		require.True(t, m.AllowsRole("node"))
	}
	v, err := kind.NewValidator(manifest.InventoryRefreshManifest)
	require.NoError(t, err)
	require.NoError(t, v.Validate([]byte(`{"sections":["gpus"],"rescan":true}`)))
	require.ErrorIs(t, v.Validate([]byte(`{"sections":["disks"]}`)), kind.ErrInvalidPayload)
	require.ErrorIs(t, v.Validate([]byte(`{"rescan":"yes"}`)), kind.ErrInvalidPayload)
	v, err = kind.NewValidator(manifest.DiagNVMLManifest)
	require.NoError(t, err)
	require.NoError(t, v.Validate([]byte(`{"expectedCount":8}`)))
	require.ErrorIs(t, v.Validate([]byte(`{"expectedCount":-1}`)), kind.ErrInvalidPayload)
}

func TestConfigFromEnv(t *testing.T) {
	cfg, err := ConfigFromEnv(func(string) string { return "" })
	require.NoError(t, err)
	require.Equal(t, "nvidia-smi", cfg.NvidiaSmi)
	require.Equal(t, "/dev/kmsg", cfg.KmsgPath)
	require.Equal(t, "/", cfg.SysRoot)
	require.Equal(t, "", cfg.XIDStore)
	require.Equal(t, xid.NewIgnore(xid.DefaultIgnore...), cfg.Ignore)
	require.Equal(t, 30*time.Second, cfg.ExecTimeout)

	env := map[string]string{EnvStateDir: "/var/lib/bcd", EnvXIDIgnore: "13", EnvExecTimeout: "5s", EnvExpectedGPUs: "8", EnvNVML: "mock:dgxh200"}
	cfg, err = ConfigFromEnv(func(k string) string { return env[k] })
	require.NoError(t, err)
	require.Equal(t, "/var/lib/bcd/gpu-xids.json", cfg.XIDStore)
	require.Equal(t, xid.NewIgnore(13), cfg.Ignore)
	require.Equal(t, 5*time.Second, cfg.ExecTimeout)
	require.Equal(t, 8, cfg.ExpectedGPUs)
	require.Equal(t, "mock:dgxh200", cfg.NVMLSource)

	for k, v := range map[string]string{EnvExecTimeout: "soon", EnvExpectedGPUs: "-1", EnvXIDIgnore: "x"} {
		_, err := ConfigFromEnv(func(key string) string {
			if key == k {
				return v
			}
			return ""
		})
		require.ErrorContains(t, err, k)
	}
}
