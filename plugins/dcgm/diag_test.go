package dcgm_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/internal/testutil"
	"github.com/better-compute/commands/plugins/dcgm"
	"github.com/better-compute/commands/plugins/dcgm/manifest"
	"github.com/better-compute/commands/plugins/internal/gpu/gputest"
	"github.com/better-compute/commands/plugins/internal/gpu/smi"
	"github.com/better-compute/commands/plugins/internal/gpu/toolexec"
	"github.com/better-compute/commands/sdk/kind"
	"github.com/better-compute/commands/sdk/kindtest"
	"github.com/better-compute/commands/sdk/nodespec"
)

const (
	gpu0 = "GPU-934a71d6-e50c-86a3-f752-3743a8c1bbb2"
	gpu1 = "GPU-1f2e3d4c-5b6a-7988-a7b6-c5d4e3f2a1b0"

	qGPUs = "--query-gpu=index,uuid,pci.bus_id --format=csv,noheader,nounits"
	qApps = "--query-compute-apps=gpu_uuid,pid,used_memory --format=csv,noheader,nounits"

	unreachable = "Error: unable to establish a connection to the specified host: localhost\nError: Unable to connect to host engine. Host engine connection invalid/disconnected.\n"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testutil.CleanupBuilds()
	os.Exit(code)
}

type fakeHost struct {
	spec nodespec.Spec
	inv  json.RawMessage
}

func (h *fakeHost) Inventory(context.Context) (json.RawMessage, time.Time, error) {
	if h.inv == nil {
		return nil, time.Time{}, kind.ErrNoHost
	}
	return h.inv, time.Now(), nil
}
func (h *fakeHost) PutInventory(context.Context, json.RawMessage) error { return nil }
func (h *fakeHost) NodeSpec(context.Context) (int64, json.RawMessage, error) {
	b, err := json.Marshal(h.spec)
	return 3, b, err
}
func (h *fakeHost) Conditions(context.Context) ([]kind.Condition, error)    { return nil, nil }
func (h *fakeHost) Journal(context.Context, int) ([]json.RawMessage, error) { return nil, nil }

type env struct {
	dcgmi, smi *gputest.FakeTool
	host       *fakeHost
	proc       string
	cfg        dcgm.Config
}

// newEnv is a node with two idle GPUs, a DCGM 3.3.9 deployment whose host
// engine answers, and nvidia-smi.
func newEnv(t *testing.T) *env {
	t.Helper()
	e := &env{dcgmi: gputest.NewFakeTool(t, "dcgmi"), smi: gputest.NewFakeTool(t, "nvidia-smi"), host: &fakeHost{}, proc: t.TempDir()}
	e.dcgmi.On("--version", "\ndcgmi  version: 3.3.9\n\n", 0)
	e.dcgmi.On("discovery -l", string(fixture(t, "discovery-l-tesla-t4-1gpu.txt")), 0)
	e.smi.On(qGPUs, "0, "+gpu0+", 00000000:3B:00.0\n1, "+gpu1+", 00000000:86:00.0\n", 0)
	e.smi.On(qApps, "", 0)
	e.cfg = dcgm.Config{
		DCGMI:    toolexec.Tool{Path: e.dcgmi.Path, Timeout: 10 * time.Second},
		SMI:      smi.Tool{Path: e.smi.Path, Timeout: 10 * time.Second},
		ProcRoot: e.proc,
	}
	return e
}

func (e *env) run(t *testing.T, payload string) (kind.Result, dcgm.Result) {
	t.Helper()
	v, err := kind.NewValidator(manifest.Manifest)
	require.NoError(t, err)
	require.NoError(t, v.Validate([]byte(payload)))
	r := kind.Run(context.Background(), dcgm.Handler(e.cfg), kind.Request{
		Command: kind.Command{ID: "cmd_1", Kind: manifest.KindName, Payload: json.RawMessage(payload)},
		Host:    e.host,
		Logger:  hclog.NewNullLogger(),
	})
	var doc dcgm.Result
	if len(r.Data) > 0 {
		require.NoError(t, json.Unmarshal(r.Data, &doc))
	}
	return r, doc
}

func (e *env) diagCalls() []string {
	var out []string
	for _, c := range e.dcgmi.Calls() {
		if strings.HasPrefix(c, "diag") {
			out = append(out, c)
		}
	}
	return out
}

func TestManifest(t *testing.T) {
	m := manifest.Manifest
	require.NoError(t, m.Validate())
	// "modules add the rest (the metal module the BMC, ... and diag.dcgm kinds)"
	require.False(t, m.APIRunnable)
	require.False(t, m.Flags.Destructive)
	require.Equal(t, kind.LaneBulk, m.Lane)
	v, err := kind.NewValidator(m)
	require.NoError(t, err)
	require.Error(t, v.Validate([]byte(`{}`)))
	require.Error(t, v.Validate([]byte(`{"level":0}`)))
	require.Error(t, v.Validate([]byte(`{"level":5}`)))
	require.Error(t, v.Validate([]byte(`{"level":2,"gpus":["0"]}`)))
	require.NoError(t, v.Validate([]byte(`{"level":4,"gpus":["`+gpu0+`"]}`)))
}

// "level 1 only checks the deployment"
func TestLevel1Deployment(t *testing.T) {
	e := newEnv(t)
	e.host.spec = nodespec.Spec{Holds: []nodespec.Hold{{GPU: gpu0, State: nodespec.HoldLive}}}
	r, doc := e.run(t, `{"level":1}`)
	require.Equal(t, kind.StatusSucceeded, r.Status, r.Message)
	require.Equal(t, dcgm.StatusPass, doc.Overall)
	require.True(t, doc.Deployment.Dcgmi.Answered)
	require.Equal(t, "3.3.9", doc.Deployment.Dcgmi.Version)
	require.True(t, doc.Deployment.HostEngine.Answered)
	require.Equal(t, 1, *doc.Deployment.HostEngine.GPUs)
	// A live hold does not matter at level 1: DCGM does not load the GPUs,
	// and neither nvidia-smi nor dcgmi diag runs.
	require.Equal(t, []string{"--version", "discovery -l"}, e.dcgmi.Calls())
	require.Empty(t, e.smi.Calls())
}

func TestLevel1HostEngineUnreachable(t *testing.T) {
	e := newEnv(t)
	e.dcgmi.OnErr("discovery -l", "", unreachable, 255)
	r, doc := e.run(t, `{"level":1}`)
	require.Equal(t, kind.StatusFailed, r.Status)
	require.Equal(t, "dcgm-unavailable", r.Reason)
	require.Equal(t, "the DCGM host engine does not answer: dcgmi discovery -l exited 255: Error: unable to establish a connection to the specified host: localhost / Error: Unable to connect to host engine. Host engine connection invalid/disconnected.", r.Message)
	require.True(t, doc.Deployment.Dcgmi.Answered)
	require.False(t, doc.Deployment.HostEngine.Answered)
}

func TestLevel1DcgmiMissing(t *testing.T) {
	e := newEnv(t)
	e.cfg.DCGMI.Path = filepath.Join(t.TempDir(), "dcgmi")
	r, doc := e.run(t, `{"level":1}`)
	require.Equal(t, "dcgm-unavailable", r.Reason)
	require.Contains(t, r.Message, "dcgmi does not answer")
	require.False(t, doc.Deployment.Dcgmi.Answered)
}

// "diag.dcgm applies the same refusal from level 2, where DCGM loads the
// GPUs, to the listed GPUs or, with none listed, to every GPU"
func TestLevel2RefusesBusyWithNoGPUsListed(t *testing.T) {
	t.Run("a live hold on any GPU", func(t *testing.T) {
		e := newEnv(t)
		e.host.spec = nodespec.Spec{Holds: []nodespec.Hold{{GPU: gpu1, MIG: "MIG-5c3a2b1d-0e9f-5a8b-9c7d-6e5f4a3b2c1d", State: nodespec.HoldLive}}}
		r, doc := e.run(t, `{"level":2}`)
		require.Equal(t, "gpu-busy", r.Reason)
		require.Equal(t, gpu1+" has a live assignment", r.Message)
		require.Equal(t, []string{gpu1 + " has a live assignment"}, doc.Busy)
		require.Empty(t, e.diagCalls())
	})
	t.Run("a passthrough", func(t *testing.T) {
		e := newEnv(t)
		e.host.spec = nodespec.Spec{Instances: []nodespec.Instance{{Name: "inst_vm2", PassthroughGPUs: []string{gpu0}}}}
		r, _ := e.run(t, `{"level":3}`)
		require.Equal(t, "gpu-busy", r.Reason)
		require.Equal(t, gpu0+" is passed through to inst_vm2", r.Message)
		require.Empty(t, e.diagCalls())
	})
	t.Run("a compute process", func(t *testing.T) {
		e := newEnv(t)
		e.smi.On(qApps, gpu1+", 777, 2048\n", 0)
		r, _ := e.run(t, `{"level":2}`)
		require.Equal(t, "gpu-busy", r.Reason)
		require.Equal(t, gpu1+" is used by process 777", r.Message)
		require.Empty(t, e.diagCalls())
	})
}

func TestLevel2ListedGPUsOnly(t *testing.T) {
	e := newEnv(t)
	// GPU 1 is held, but only GPU 0 is listed; the host engine itself holds
	// every device node and is no workload.
	e.host.spec = nodespec.Spec{Holds: []nodespec.Hold{{GPU: gpu1, State: nodespec.HoldLive}}}
	holder := filepath.Join(e.proc, "55")
	require.NoError(t, os.MkdirAll(filepath.Join(holder, "fd"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(holder, "comm"), []byte("nv-hostengine\n"), 0o644))
	require.NoError(t, os.Symlink("/dev/nvidia0", filepath.Join(holder, "fd", "4")))
	e.dcgmi.On("diag -r 2 -j -i 0", string(fixture(t, "diag-r3-j-dcgm3-tesla-t4-pass.json")), 0)
	r, doc := e.run(t, `{"level":2,"gpus":["`+gpu0+`"]}`)
	require.Equal(t, kind.StatusSucceeded, r.Status, r.Message)
	require.Equal(t, []string{"diag -r 2 -j -i 0"}, e.diagCalls())
	require.Equal(t, dcgm.StatusPass, doc.Overall)
	require.Equal(t, 0, *doc.ExitCode)
	require.Equal(t, dcgm.ShapeDCGM3, doc.Diag.Shape)
	for _, tr := range doc.Diag.Results {
		if tr.GPU != nil {
			require.Equal(t, gpu0, tr.UUID)
		}
	}
}

// "Non-zero exit = failure; still read the JSON."
func TestLevel2FailureStillReadsTheJSON(t *testing.T) {
	e := newEnv(t)
	e.dcgmi.On("diag -r 2 -j", string(fixture(t, "diag-r2-j-dcgm4-synthetic-fail.json")), 226)
	r, doc := e.run(t, `{"level":2}`)
	require.Equal(t, kind.StatusFailed, r.Status)
	require.Equal(t, "diag-failed", r.Reason)
	require.Equal(t, "pcie failed on GPU 1 ("+gpu1+"): GPU 1 PCIe link width x8 is below the expected x16", r.Message)
	require.Equal(t, dcgm.StatusFail, doc.Overall)
	require.Equal(t, 226, *doc.ExitCode)
	require.Equal(t, dcgm.ShapeDCGM4, doc.Diag.Shape)
	require.Len(t, doc.Diag.Results, 7)
	warn := doc.Diag.Results[4]
	require.Equal(t, "memory", warn.Test)
	require.Equal(t, dcgm.StatusWarn, warn.Status)
	require.Equal(t, gpu1, warn.UUID)
	require.Equal(t, []string{"GPU 1 memory test ran with reduced allocation"}, warn.Warnings)
}

// A document of neither DCGM 3's nor DCGM 4's shape, exit 0 and every test
// passing in it, fails the command and names the shape.
func TestLevel2RefusesAnAllPassReportOfAnUnknownShape(t *testing.T) {
	e := newEnv(t)
	e.dcgmi.On("diag -r 2 -j", `{"DCGM GPU Diagnostic":[{"category":"Hardware","tests":[{"name":"Diagnostic","results":[{"gpu_ids":"0,1","status":"Pass"}]}]}]}`, 0)
	r, doc := e.run(t, `{"level":2}`)
	require.Equal(t, kind.StatusFailed, r.Status)
	require.Equal(t, "diag-failed", r.Reason)
	require.Contains(t, r.Message, `"DCGM GPU Diagnostic" is an array, not DCGM 3's object of test_categories`)
	require.Equal(t, dcgm.StatusFail, doc.Overall)
	require.Nil(t, doc.Diag)
}

func TestLevel2NonZeroExitWithoutJSON(t *testing.T) {
	e := newEnv(t)
	e.dcgmi.OnErr("diag -r 2 -j", "", unreachable, 255)
	r, doc := e.run(t, `{"level":2}`)
	require.Equal(t, "diag-failed", r.Reason)
	require.Contains(t, r.Message, "dcgmi diag exited 255 without a readable report")
	require.Contains(t, r.Message, "unable to establish a connection")
	require.Nil(t, doc.Diag)
}

func TestLevel2UsesBcdsInventory(t *testing.T) {
	e := newEnv(t)
	e.host.inv = json.RawMessage(`{"schemaVersion":1,"gpus":[{"index":0,"uuid":"` + gpu0 + `","busId":"0000:3b:00"},{"index":1,"uuid":"` + gpu1 + `","busId":"0000:86:00"}]}`)
	e.dcgmi.On("diag -r 3 -j -i 1", string(fixture(t, "diag-r2-j-dcgm3-synthetic-fail.json")), 0)
	r, doc := e.run(t, `{"level":3,"gpus":["`+gpu1+`"]}`)
	require.Equal(t, "diag-failed", r.Reason, r.Message)
	require.Contains(t, r.Message, "GPU Memory failed on GPU 1 ("+gpu1+")")
	require.Equal(t, "3.3.9", doc.Diag.Version)
	require.NotContains(t, e.smi.Calls(), qGPUs, "the GPU list came from bcd")
}

func TestUnknownGPU(t *testing.T) {
	e := newEnv(t)
	r, _ := e.run(t, `{"level":2,"gpus":["GPU-00000000-0000-0000-0000-000000000000"]}`)
	require.Equal(t, "unknown-gpu", r.Reason)
	require.Empty(t, e.diagCalls())
}

func TestPluginBinary(t *testing.T) {
	bin := testutil.BuildBinary(t, "./plugins/dcgm/cmd/bc-kind-dcgm")
	e := newEnv(t)
	p := kindtest.Start(t, bin, kindtest.Options{Host: e.host, Env: e.pluginEnv()})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	ms, err := p.Manifests(ctx)
	require.NoError(t, err)
	require.Len(t, ms, 1)
	require.Equal(t, manifest.Manifest.Digest(), ms[0].Digest())

	r, err := p.Execute(ctx, manifest.KindName, json.RawMessage(`{"level":1}`), nil)
	require.NoError(t, err)
	require.Equal(t, kind.StatusSucceeded, r.Status, r.Message)

	e.host.spec = nodespec.Spec{Holds: []nodespec.Hold{{GPU: gpu0, Slot: "slot-1", State: nodespec.HoldLive}}}
	r, err = p.Execute(ctx, manifest.KindName, json.RawMessage(`{"level":2}`), nil)
	require.NoError(t, err)
	require.Equal(t, "gpu-busy", r.Reason)
	require.Equal(t, gpu0+" has a live assignment", r.Message)
	require.Empty(t, e.diagCalls())
}

func (e *env) pluginEnv() []string {
	return []string{
		dcgm.EnvDcgmi + "=" + e.dcgmi.Path,
		dcgm.EnvNvidiaSmi + "=" + e.smi.Path,
		dcgm.EnvProcRoot + "=" + e.proc,
	}
}

// sdk/kindtest's conformance checks; the long-running command is a level 2
// diagnostic that hangs until the cancel kills dcgmi's process group.
func TestConformance(t *testing.T) {
	bin := testutil.BuildBinary(t, "./plugins/dcgm/cmd/bc-kind-dcgm")
	e := newEnv(t)
	e.dcgmi.Hang("diag -r 2 -j")
	kindtest.Run(t, bin, kindtest.Options{
		Kinds:       []string{manifest.KindName},
		BadPayloads: map[string]json.RawMessage{manifest.KindName: json.RawMessage(`{"level":7}`)},
		LongRunning: &kindtest.Case{Kind: manifest.KindName, Payload: json.RawMessage(`{"level":2}`)},
		InjectPanic: &kindtest.Case{Kind: manifest.KindName, Payload: json.RawMessage(`{"level":2}`)},
		Host:        e.host,
		Env:         e.pluginEnv(),
	})
	testutil.WaitFor(t, 10*time.Second, "the cancelled diagnostic's child to be killed", func() bool { return gputest.Gone(e.dcgmi.HangChild()) })
}
