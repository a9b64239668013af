package gpureset_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/internal/testutil"
	"github.com/better-compute/commands/plugins/gpureset"
	"github.com/better-compute/commands/plugins/gpureset/manifest"
	"github.com/better-compute/commands/plugins/internal/gpu/gputest"
	"github.com/better-compute/commands/plugins/internal/gpu/smi"
	"github.com/better-compute/commands/plugins/internal/gpu/xid"
	"github.com/better-compute/commands/sdk/kind"
	"github.com/better-compute/commands/sdk/kindtest"
	"github.com/better-compute/commands/sdk/nodespec"
)

const (
	gpuA = "GPU-934a71d6-e50c-86a3-f752-3743a8c1bbb2"
	gpuB = "GPU-1f2e3d4c-5b6a-7988-a7b6-c5d4e3f2a1b0"

	qGPUs    = "--query-gpu=index,uuid,pci.bus_id --format=csv,noheader,nounits"
	qApps    = "--query-compute-apps=gpu_uuid,pid,used_memory --format=csv,noheader,nounits"
	qPersist = "--query-gpu=uuid,persistence_mode --format=csv,noheader,nounits -i "
	qHealth  = "--query-gpu=index,uuid,pci.bus_id,ecc.errors.uncorrected.volatile.total --format=csv,noheader,nounits -i "
	qRemap   = "--query-remapped-rows=gpu_uuid,remapped_rows.correctable,remapped_rows.uncorrectable,remapped_rows.pending,remapped_rows.failure --format=csv,noheader,nounits"
	// qHealthWithRemap names the remapped_rows.* fields in --query-gpu,
	// which a driver that does not know them refuses as a whole.
	qHealthWithRemap = "--query-gpu=index,uuid,pci.bus_id,ecc.errors.uncorrected.volatile.total,remapped_rows.pending,remapped_rows.failure --format=csv,noheader,nounits -i "
	oldDriver        = "Field \"remapped_rows.pending\" is not a valid field to query.\n"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testutil.CleanupBuilds()
	os.Exit(code)
}

// fakeHost is bcd's side as the test wants it.
type fakeHost struct {
	spec    nodespec.Spec
	specErr error
	inv     json.RawMessage
}

func (h *fakeHost) Inventory(context.Context) (json.RawMessage, time.Time, error) {
	return h.inv, time.Time{}, nil
}
func (h *fakeHost) PutInventory(context.Context, json.RawMessage) error { return nil }
func (h *fakeHost) NodeSpec(context.Context) (int64, json.RawMessage, error) {
	if h.specErr != nil {
		return 0, nil, h.specErr
	}
	b, err := json.Marshal(h.spec)
	return 7, b, err
}
func (h *fakeHost) Conditions(context.Context) ([]kind.Condition, error)    { return nil, nil }
func (h *fakeHost) Journal(context.Context, int) ([]json.RawMessage, error) { return nil, nil }

// xidRecorder is an XID store that records what it was asked to clear.
type xidRecorder struct {
	lock    sync.Mutex
	cleared []string
}

func (x *xidRecorder) ClearGPU(_ context.Context, uuid, busID string) error {
	x.lock.Lock()
	defer x.lock.Unlock()
	x.cleared = append(x.cleared, uuid+"@"+busID)
	return nil
}

type env struct {
	smi  *gputest.FakeTool
	proc string
	xids *xidRecorder
	host *fakeHost
	cfg  gpureset.Config
}

// newEnv is a node with two idle GPUs, persistence mode on for both, and an
// empty spec.
func newEnv(t *testing.T) *env {
	t.Helper()
	e := &env{smi: gputest.NewFakeTool(t, "nvidia-smi"), proc: t.TempDir(), xids: &xidRecorder{}, host: &fakeHost{}}
	e.smi.On(qGPUs, "0, "+gpuA+", 00000000:3B:00.0\n1, "+gpuB+", 00000000:86:00.0\n", 0)
	e.smi.On(qApps, "", 0)
	for _, g := range []string{gpuA, gpuB} {
		e.smi.On(qPersist+g, g+", Enabled\n", 0)
		e.smi.On("-pm 0 -i "+g, "Disabled persistence mode for GPU "+g+".\nAll done.\n", 0)
		e.smi.On("-pm 1 -i "+g, "Enabled persistence mode for GPU "+g+".\nAll done.\n", 0)
		e.smi.On("--gpu-reset -i "+g, "GPU "+g+" was successfully reset.\nAll done.\n", 0)
	}
	e.smi.On(qHealth+gpuA, "0, "+gpuA+", 00000000:3B:00.0, 0\n", 0)
	e.smi.On(qHealth+gpuB, "1, "+gpuB+", 00000000:86:00.0, 0\n", 0)
	e.smi.On(qRemap, gpuA+", 0, 0, No, No\n"+gpuB+", 0, 0, No, No\n", 0)
	e.cfg = gpureset.Config{
		SMI:          smi.Tool{Path: e.smi.Path, Timeout: 10 * time.Second},
		ResetTimeout: 10 * time.Second,
		ProcRoot:     e.proc,
		XIDs:         e.xids,
	}
	return e
}

func (e *env) run(t *testing.T, gpus ...string) (kind.Result, gpureset.Result) {
	t.Helper()
	payload, err := json.Marshal(gpureset.Payload{GPUs: gpus})
	require.NoError(t, err)
	v, err := kind.NewValidator(manifest.Manifest)
	require.NoError(t, err)
	require.NoError(t, v.Validate(payload))
	r := kind.Run(context.Background(), gpureset.Handler(e.cfg), kind.Request{
		Command:  kind.Command{ID: "cmd_1", Kind: manifest.KindName, Payload: payload},
		Progress: kind.ProgressFunc(func(int, string) {}),
		Host:     e.host,
		Logger:   hclog.NewNullLogger(),
	})
	var doc gpureset.Result
	if len(r.Data) > 0 {
		require.NoError(t, json.Unmarshal(r.Data, &doc))
	}
	return r, doc
}

func (e *env) resetCalls() []string {
	var out []string
	for _, c := range e.smi.Calls() {
		if strings.HasPrefix(c, "--gpu-reset") {
			out = append(out, c)
		}
	}
	return out
}

func TestManifest(t *testing.T) {
	m := manifest.Manifest
	require.NoError(t, m.Validate())
	// "bcd also runs gpu.reset, which commands.run does not accept"
	require.False(t, m.APIRunnable)
	require.True(t, m.Flags.Destructive)
	require.False(t, m.Flags.RetrySafe)
	require.Equal(t, kind.LaneProvision, m.Lane)

	v, err := kind.NewValidator(m)
	require.NoError(t, err)
	require.Error(t, v.Validate([]byte(`{}`)))
	require.Error(t, v.Validate([]byte(`{"gpus":[]}`)))
	require.Error(t, v.Validate([]byte(`{"gpus":["0"]}`)))
	require.NoError(t, v.Validate([]byte(`{"gpus":["`+gpuA+`"]}`)))
}

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

// "It resets the others with nvidia-smi --gpu-reset, reports per GPU whether
// the reset worked and whether a fresh inventory shows it healthy, and clears
// the XID conditions of a GPU the reset left healthy."
func TestResetsRecordingAndRestoringPersistence(t *testing.T) {
	e := newEnv(t)
	e.smi.On(qPersist+gpuB, gpuB+", Disabled\n", 0)
	r, doc := e.run(t, gpuA, gpuB)
	require.Equal(t, kind.StatusSucceeded, r.Status, r.Message)

	require.Equal(t, []string{
		qGPUs,
		qApps,
		qPersist + gpuA,
		"-pm 0 -i " + gpuA,
		"--gpu-reset -i " + gpuA,
		"-pm 1 -i " + gpuA,
		qHealth + gpuA,
		qRemap,
		qPersist + gpuB,
		// persistence was off: nothing to turn off or restore
		"--gpu-reset -i " + gpuB,
		qHealth + gpuB,
		qRemap,
	}, e.smi.Calls())

	require.Len(t, doc.GPUs, 2)
	a, b := doc.GPUs[0], doc.GPUs[1]
	require.Equal(t, gpuA, a.UUID)
	require.Equal(t, "enabled", a.PersistenceMode)
	require.True(t, a.PersistenceRestored)
	require.Equal(t, gpureset.ResetOK, a.Reset)
	require.True(t, a.Healthy)
	require.True(t, a.XIDsCleared)
	require.Equal(t, "disabled", b.PersistenceMode)
	require.True(t, b.Healthy)
	require.Equal(t, []string{gpuA + "@00000000:3B:00.0", gpuB + "@00000000:86:00.0"}, e.xids.cleared)
}

// nvidia-smi refuses a reset while persistence mode or another client holds
// the GPU: "In use by another client", exit 255.
func TestResetInUseByAnotherClient(t *testing.T) {
	e := newEnv(t)
	e.smi.OnErr("--gpu-reset -i "+gpuA, "", "GPU 00000000:3B:00.0 is currently in use by another process.\n\n1 device is currently being used by one or more other processes (e.g., Fabric Manager, CUDA application, graphics application such as an X server, or a monitoring application such as another instance of nvidia-smi). Please first kill all processes using this device and all compute applications running in the system.\nIn use by another client\n", 255)
	r, doc := e.run(t, gpuA)
	require.Equal(t, kind.StatusFailed, r.Status)
	require.Equal(t, "reset-failed", r.Reason)
	require.Contains(t, r.Message, "exit 255")
	require.Len(t, doc.GPUs, 1)
	g := doc.GPUs[0]
	require.Equal(t, gpureset.ResetFailed, g.Reset)
	require.Contains(t, g.Error, "In use by another client")
	require.False(t, g.Healthy)
	require.False(t, g.XIDsCleared)
	// Persistence mode is put back even though the reset failed.
	require.True(t, g.PersistenceRestored)
	require.Contains(t, e.smi.Calls(), "-pm 1 -i "+gpuA)
	require.Empty(t, e.xids.cleared)
}

// A hung GPU firmware hangs nvidia-smi: the reset is killed at its timeout,
// with every process it started.
func TestResetHangIsKilledByTheTimeout(t *testing.T) {
	e := newEnv(t)
	e.smi.Hang("--gpu-reset -i " + gpuA)
	e.cfg.ResetTimeout = 500 * time.Millisecond
	start := time.Now()
	r, doc := e.run(t, gpuA)
	require.Less(t, time.Since(start), 30*time.Second)
	require.Equal(t, "reset-failed", r.Reason)
	require.Len(t, doc.GPUs, 1)
	require.Contains(t, doc.GPUs[0].Error, "timed out and was killed after 500ms")
	require.True(t, doc.GPUs[0].PersistenceRestored)

	child := e.smi.HangChild()
	require.NotZero(t, child, "the hang started its child")
	testutil.WaitFor(t, 10*time.Second, "the hung reset's child to be killed", func() bool { return gputest.Gone(child) })
}

// "NVIDIA says the reset is not guaranteed": a reset that leaves the GPU
// unhealthy is reported, and its XID conditions stay.
func TestResetLeavesGPUUnhealthy(t *testing.T) {
	e := newEnv(t)
	e.smi.On(qRemap, gpuA+", 0, 1, Yes, No\n"+gpuB+", 0, 0, No, No\n", 0)
	r, doc := e.run(t, gpuA, gpuB)
	require.Equal(t, kind.StatusFailed, r.Status)
	require.Equal(t, "gpu-unhealthy", r.Reason)
	require.Contains(t, r.Message, gpuA+": a row remap is still pending")
	a := doc.GPUs[0]
	require.Equal(t, gpureset.ResetOK, a.Reset)
	require.False(t, a.Healthy)
	require.Equal(t, []string{"a row remap is still pending"}, a.Problems)
	require.False(t, a.XIDsCleared)
	// The healthy one is still cleared.
	require.Equal(t, []string{gpuB + "@00000000:86:00.0"}, e.xids.cleared)
}

// A driver that does not know the remapped_rows.* fields of --query-gpu
// refuses a query that names one as a whole: the health after the reset
// reads the remapped rows as the inventory does, and a driver that cannot
// say leaves a note, not an unhealthy GPU.
func TestResetHealthOnADriverWithoutRemappedRowsFields(t *testing.T) {
	e := newEnv(t)
	e.smi.On(qHealthWithRemap+gpuA, oldDriver, 2)
	e.smi.On(qRemap, oldDriver, 2)
	r, doc := e.run(t, gpuA)
	require.Equal(t, kind.StatusSucceeded, r.Status, r.Message)
	g := doc.GPUs[0]
	require.True(t, g.Healthy, g.Problems)
	require.True(t, g.XIDsCleared)
	require.Contains(t, g.Notes, `row remapping not checked: nvidia-smi failed (exit 2): Field "remapped_rows.pending" is not a valid field to query.`)
	require.NotContains(t, e.smi.Calls(), qHealthWithRemap+gpuA)
}

func TestResetGPUFallenOffTheBus(t *testing.T) {
	e := newEnv(t)
	e.smi.OnErr(qHealth+gpuA, "", "Unable to determine the device handle for GPU0000:3B:00.0: Unknown Error\n", 15)
	r, doc := e.run(t, gpuA)
	require.Equal(t, "gpu-unhealthy", r.Reason)
	require.False(t, doc.GPUs[0].Healthy)
	require.Contains(t, doc.GPUs[0].Problems[0], "fallen off the bus")
	require.Empty(t, e.xids.cleared)
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

func TestNvidiaSmiDriverNotLoaded(t *testing.T) {
	e := newEnv(t)
	e.smi.OnErr(qGPUs, "", "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the latest NVIDIA driver is installed and running.\n", 9)
	r, _ := e.run(t, gpuA)
	require.Equal(t, "nvidia-smi-failed", r.Reason)
	require.Contains(t, r.Message, "exit 9 (the NVIDIA driver is not loaded)")
}

// The plugin binary, out of process as bcd starts it (sdk/kindtest), over
// real gRPC, with the host's node spec served back through the broker.
func TestPluginBinary(t *testing.T) {
	bin := testutil.BuildBinary(t, "./plugins/gpureset/cmd/bc-kind-gpureset")
	e := newEnv(t)
	p := kindtest.Start(t, bin, kindtest.Options{Host: e.host, Env: []string{
		gpureset.EnvNvidiaSmi + "=" + e.smi.Path,
		gpureset.EnvProcRoot + "=" + e.proc,
		gpureset.EnvResetTimeout + "=10s",
	}})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	ms, err := p.Manifests(ctx)
	require.NoError(t, err)
	require.Len(t, ms, 1)
	require.Equal(t, manifest.Manifest.Digest(), ms[0].Digest())

	e.host.spec = nodespec.Spec{Instances: []nodespec.Instance{{Name: "inst_vm1", PassthroughGPUs: []string{gpuB}}}}
	r, err := p.Execute(ctx, manifest.KindName, json.RawMessage(`{"gpus":["`+gpuB+`"]}`), nil)
	require.NoError(t, err)
	require.Equal(t, "gpu-busy", r.Reason)
	require.Equal(t, gpuB+" is passed through to inst_vm1", r.Message)

	e.host.spec = nodespec.Spec{}
	var progress []string
	r, err = p.Execute(ctx, manifest.KindName, json.RawMessage(`{"gpus":["`+gpuA+`"]}`), func(_ int, msg string) { progress = append(progress, msg) })
	require.NoError(t, err)
	require.Equal(t, kind.StatusSucceeded, r.Status, r.Message)
	require.Contains(t, progress, "resetting "+gpuA)
	var doc gpureset.Result
	require.NoError(t, json.Unmarshal(r.Data, &doc))
	require.True(t, doc.GPUs[0].Healthy)
	// Without a state directory no XID store is configured: said, not hidden.
	require.Equal(t, "no XID store configured", doc.GPUs[0].XIDError)
}

// sdk/kindtest's conformance checks; the long-running command is a reset
// that hangs until the cancel kills it.
func TestConformance(t *testing.T) {
	bin := testutil.BuildBinary(t, "./plugins/gpureset/cmd/bc-kind-gpureset")
	e := newEnv(t)
	e.smi.Hang("--gpu-reset -i " + gpuA)
	kindtest.Run(t, bin, kindtest.Options{
		Kinds:       []string{manifest.KindName},
		BadPayloads: map[string]json.RawMessage{manifest.KindName: json.RawMessage(`{"gpus":[]}`)},
		LongRunning: &kindtest.Case{Kind: manifest.KindName, Payload: json.RawMessage(`{"gpus":["` + gpuA + `"]}`)},
		InjectPanic: &kindtest.Case{Kind: manifest.KindName, Payload: json.RawMessage(`{"gpus":["` + gpuA + `"]}`)},
		Host:        e.host,
		Env: []string{
			gpureset.EnvNvidiaSmi + "=" + e.smi.Path,
			gpureset.EnvProcRoot + "=" + e.proc,
			gpureset.EnvResetTimeout + "=10m",
		},
	})
}

// The XID store that inventory.refresh keeps loses the conditions of the GPU
// the reset left healthy, and only those.
func TestPluginBinaryClearsTheXIDStore(t *testing.T) {
	bin := testutil.BuildBinary(t, "./plugins/gpureset/cmd/bc-kind-gpureset")
	e := newEnv(t)
	root := t.TempDir()
	bootDir := filepath.Join(root, "proc", "sys", "kernel", "random")
	require.NoError(t, os.MkdirAll(bootDir, 0o755))
	const boot = "4e1ba0c3-3b2a-4b8e-9f64-1c2d3e4f5a6b"
	require.NoError(t, os.WriteFile(filepath.Join(bootDir, "boot_id"), []byte(boot+"\n"), 0o644))
	storePath := filepath.Join(t.TempDir(), xid.StoreFile)
	st, err := xid.OpenStore(storePath, boot)
	require.NoError(t, err)
	require.True(t, st.Observe(xid.Record{Seq: 10, Timestamp: time.Second, Message: "NVRM: Xid (PCI:0000:3b:00): 63, pid='<unknown>', name=<unknown>, Row Remapper: New row (0x00000000000d2a40) marked for remapping, reset gpu to activate."}))
	require.True(t, st.Observe(xid.Record{Seq: 11, Timestamp: 2 * time.Second, Message: "NVRM: Xid (PCI:0000:86:00): 48, pid='<unknown>', name=<unknown>, An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer at partition 6, subpartition 0."}))
	require.NoError(t, st.Save())

	p := kindtest.Start(t, bin, kindtest.Options{Host: e.host, Env: []string{
		gpureset.EnvNvidiaSmi + "=" + e.smi.Path,
		gpureset.EnvSysRoot + "=" + root,
		gpureset.EnvProcRoot + "=" + e.proc,
		gpureset.EnvXIDStore + "=" + storePath,
	}})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r, err := p.Execute(ctx, manifest.KindName, json.RawMessage(`{"gpus":["`+gpuA+`"]}`), nil)
	require.NoError(t, err)
	require.Equal(t, kind.StatusSucceeded, r.Status, r.Message)
	var doc gpureset.Result
	require.NoError(t, json.Unmarshal(r.Data, &doc))
	require.True(t, doc.GPUs[0].XIDsCleared, doc.GPUs[0].XIDError)

	after, err := xid.OpenStore(storePath, boot)
	require.NoError(t, err)
	conds := after.Conditions(nil)
	require.Len(t, conds, 1)
	require.Equal(t, "0000:86:00", conds[0].BusID)
	require.Equal(t, 48, conds[0].XID)
}

// "The daemon stops between actions and reports the real outcome, so a side
// effect that already happened is never hidden."
func TestCancelStopsBetweenGPUsAndRestoresPersistence(t *testing.T) {
	e := newEnv(t)
	e.smi.Hang("--gpu-reset -i " + gpuA)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan kind.Result, 1)
	go func() {
		done <- kind.Run(ctx, gpureset.Handler(e.cfg), kind.Request{
			Command: kind.Command{ID: "cmd_1", Kind: manifest.KindName, Payload: json.RawMessage(`{"gpus":["` + gpuA + `","` + gpuB + `"]}`)},
			Host:    e.host,
			Logger:  hclog.NewNullLogger(),
		})
	}()
	// Cancel once the reset of the first GPU is under way.
	testutil.WaitFor(t, 20*time.Second, "the first GPU's reset to start", func() bool { return e.smi.HangChild() != 0 })
	cancel()
	var r kind.Result
	select {
	case r = <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("the cancelled reset did not return")
	}
	require.Equal(t, kind.StatusCancelled, r.Status, r.Message)
	var doc gpureset.Result
	require.NoError(t, json.Unmarshal(r.Data, &doc))
	require.Len(t, doc.GPUs, 2)
	require.Equal(t, gpureset.ResetFailed, doc.GPUs[0].Reset)
	require.True(t, doc.GPUs[0].PersistenceRestored, "persistence mode is restored after a cancel")
	require.Equal(t, gpureset.ResetNotAttempted, doc.GPUs[1].Reset)
	require.NotContains(t, e.smi.Calls(), "--gpu-reset -i "+gpuB)
	require.Contains(t, e.smi.Calls(), "-pm 1 -i "+gpuA)
}
