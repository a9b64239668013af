package gpureset_test

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
	"github.com/better-compute/commands/plugins/gpureset/manifest"
	"github.com/better-compute/commands/plugins/internal/gpu/xid"
	"github.com/better-compute/commands/sdk/kind"
	"github.com/better-compute/commands/sdk/kindtest"
	"github.com/better-compute/commands/sdk/nodespec"
)

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
