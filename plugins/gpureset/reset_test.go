package gpureset_test

import (
	"context"
	"encoding/json"
	"os"
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
	"github.com/better-compute/commands/sdk/kind"
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
