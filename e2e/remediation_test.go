package e2e

// The provision module's remediation end to end: the real control plane
// built as bc-server builds it (the first-party kinds, the modules
// component with River, modules.remediation.enabled), a real `bcd run`
// with the first-party plugins, and, as the node's GPUs, a fake nvidia-smi
// the test writes (the interface the real plugins use): two H200s, the
// second with a pending row remap that a --gpu-reset clears.

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/better-compute/commands/controlplane/modules/remediation"
	"github.com/better-compute/commands/controlplane/server"
	"github.com/better-compute/commands/controlplane/server/servertest"
	"github.com/better-compute/commands/internal/testutil"
	apiv1 "github.com/better-compute/commands/proto/bc/api/v1"
)

// newModulesCluster is a control plane built as bc-server builds it (the
// first-party manifests) with adjust applied, on servertest's database,
// node CA and addresses, and a plugin directory with the first-party
// plugins.
func newModulesCluster(t *testing.T, adjust func(*server.Config)) *cluster {
	t.Helper()
	c := &cluster{t: t, bcd: testutil.BuildBinary(t, "./bcd/cmd/bcd"), plugins: t.TempDir()}
	for _, pkg := range firstPartyPlugins {
		src := testutil.BuildBinary(t, pkg)
		b, err := os.ReadFile(src)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(c.plugins, filepath.Base(pkg)), b, 0o755))
	}
	first := servertest.Start(t, nil)
	require.NoError(t, first.Stop())
	cfg := first.Config
	cfg.GRPCListen, cfg.Gateway.Listen, cfg.HTTPListen = first.GRPC, first.Gateway, first.HTTP
	adjust(&cfg)
	srv, err := server.New(context.Background(), cfg, nil, hclog.NewNullLogger())
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	stopped := false
	stop := func() error {
		if stopped {
			return nil
		}
		stopped = true
		cancel()
		return <-done
	}
	t.Cleanup(func() { _ = stop() })
	testutil.WaitFor(t, 30*time.Second, "the server to be ready", func() bool {
		resp, err := http.Get("http://" + first.HTTP + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	c.srv = &servertest.Running{Server: srv, GRPC: first.GRPC, HTTP: first.HTTP, Gateway: first.Gateway, CADir: first.CADir,
		CA: srv.CA(), Pool: first.Pool, Queue: srv.Queue(), Stop: stop, Config: cfg}
	c.cfg = cfg
	conn, err := grpc.NewClient(c.srv.GRPC, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	c.conn, c.api = conn, apiv1.NewCommandsClient(conn)
	return c
}

// remapSmi writes a fake nvidia-smi: two H200s that inventory.refresh
// lists, GPU 1 with a row remap pending while the file pending-<uuid>
// beside it exists; --gpu-reset of a GPU removes its file (the reset
// activates the remap). Every call lands in calls.log.
func remapSmi(t *testing.T) (path, calls string) {
	t.Helper()
	d := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(d, "pending-"+fakeGPU1), nil, 0o644))
	script := `#!/bin/sh
d=$(dirname "$0")
printf '%s\n' "$*" >> "$d/calls.log"
last=""
for a in "$@"; do last=$a; done
case "$last" in
` + fakeGPU0 + `) idx=0 bus=00000000:3B:00.0 ;;
` + fakeGPU1 + `) idx=1 bus=00000000:86:00.0 ;;
esac
remap() { if [ -e "$d/pending-$1" ]; then printf '%s, 0, 1, Yes, No\n' "$1"; else printf '%s, 0, 1, No, No\n' "$1"; fi; }
case "$*" in
"--query-gpu=index,uuid,pci.bus_id,name,driver_version,persistence_mode,mig.mode.current,mig.mode.pending,ecc.mode.current,ecc.mode.pending,ecc.errors.uncorrected.volatile.total,ecc.errors.uncorrected.aggregate.total,pcie.link.gen.current,pcie.link.gen.max,pcie.link.width.current,pcie.link.width.max --format=csv,noheader,nounits")
  printf '0, ` + fakeGPU0 + `, 00000000:3B:00.0, NVIDIA H200, 550.54.15, Enabled, Disabled, Disabled, Enabled, Enabled, 0, 0, 5, 5, 16, 16\n'
  printf '1, ` + fakeGPU1 + `, 00000000:86:00.0, NVIDIA H200, 550.54.15, Enabled, Disabled, Disabled, Enabled, Enabled, 0, 0, 5, 5, 16, 16\n' ;;
"--query-gpu=index,uuid,pci.bus_id --format=csv,noheader,nounits")
  printf '0, ` + fakeGPU0 + `, 00000000:3B:00.0\n1, ` + fakeGPU1 + `, 00000000:86:00.0\n' ;;
"--query-compute-apps=gpu_uuid,pid,used_memory --format=csv,noheader,nounits") ;;
"--query-remapped-rows=gpu_uuid,remapped_rows.correctable,remapped_rows.uncorrectable,remapped_rows.pending,remapped_rows.failure --format=csv,noheader,nounits")
  remap ` + fakeGPU0 + `; remap ` + fakeGPU1 + ` ;;
"--query-gpu=uuid,persistence_mode --format=csv,noheader,nounits -i "*) printf '%s, Enabled\n' "$last" ;;
"--query-gpu=index,uuid,pci.bus_id,ecc.errors.uncorrected.volatile.total --format=csv,noheader,nounits -i "*)
  printf '%s, %s, %s, 0\n' "$idx" "$last" "$bus" ;;
"-pm 0 -i "*) printf 'Disabled persistence mode for GPU %s.\nAll done.\n' "$last" ;;
"-pm 1 -i "*) printf 'Enabled persistence mode for GPU %s.\nAll done.\n' "$last" ;;
"--gpu-reset -i "*) [ -e "$d/sticky" ] || rm -f "$d/pending-$last"; printf 'GPU %s was successfully reset.\nAll done.\n' "$last" ;;
*) echo "fake nvidia-smi: no answer scripted for: $*" >&2; exit 2 ;;
esac
`
	return writeExec(t, filepath.Join(d, "nvidia-smi"), script), filepath.Join(d, "calls.log")
}

// inventoryPending reads what nodes.get shows of GPU 1's row remap.
func (c *cluster) inventoryPending(gpu string) (pending, known bool) {
	c.t.Helper()
	n, err := apiv1.NewNodesClient(c.conn).Get(c.ctx(), &apiv1.GetNodeRequest{TenantId: servertest.TenantA, NodeId: servertest.NodeA1})
	if err != nil {
		return false, false
	}
	gpus, _ := n.GetInventory().AsMap()["gpus"].([]any)
	for _, g := range gpus {
		m, _ := g.(map[string]any)
		if m["uuid"] != gpu {
			continue
		}
		rr, ok := m["remappedRows"].(map[string]any)
		if !ok {
			return false, false
		}
		p, _ := rr["pending"].(bool)
		return p, true
	}
	return false, false
}

func (c *cluster) plan() []*apiv1.Remediation {
	c.t.Helper()
	p, err := apiv1.NewReconcilerClient(c.conn).Plan(c.ctx(), &apiv1.GetReconcilerPlanRequest{TenantId: servertest.TenantA, IncludeFinished: true})
	require.NoError(c.t, err)
	return p.GetItems()
}

// "End to end on real PostgreSQL with bcd nodes on mock GPUs: RowRemapPending
// injected on one GPU that a hold names → nothing is sent; the hold is
// released → gpu.reset is queued under a platform batch, runs, the fresh
// inventory shows the condition cleared, and commands list and events show
// the whole chain."
func TestE2E_RemediationResetsARowRemapPendingGPUOnceItsHoldIsReleased(t *testing.T) {
	c := newModulesCluster(t, func(cfg *server.Config) {
		cfg.Modules.Remediation.Enabled = true
		cfg.Modules.Interval = server.Duration(300 * time.Millisecond)
	})
	n := c.join()
	smiPath, calls := remapSmi(t)
	env := baseEnv(t)
	env["BCD_NVML"] = "none"
	env["BCD_NVIDIA_SMI"] = smiPath
	env["BCD_PROC_ROOT"] = t.TempDir()
	n.configure(env)
	// configure writes nvmlSource mock:dgxh200; this node has no NVML.
	b, err := os.ReadFile(n.config)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(n.config, []byte(strings.Replace(string(b), `nvmlSource: "mock:dgxh200"`, `nvmlSource: "none"`, 1)), 0o600))
	n.start()

	// A live hold names GPU 1, then the inventory shows its pending remap.
	out, stderr, code := c.cli("nodes", "set-spec", servertest.NodeA1, `spec={"holds":[{"gpu":"`+fakeGPU1+`","state":"live","allocation":"alloc-7"}]}`)
	require.Equal(t, 0, code, stderr+out)
	inv := c.waitState(c.run("inventory.refresh", map[string]any{}).GetId(), "succeeded")
	require.NotNil(t, inv)
	testutil.WaitFor(t, 30*time.Second, "nodes.get to show GPU 1's pending row remap", func() bool {
		p, ok := c.inventoryPending(fakeGPU1)
		return ok && p
	})
	testutil.WaitFor(t, 30*time.Second, "the remediation to wait for the hold", func() bool {
		for _, r := range c.plan() {
			if r.GetGpu() == fakeGPU1 && r.GetWaitingReason() == remediation.WaitGPUInUse {
				return true
			}
		}
		return false
	})
	out, stderr, code = c.cli("reconciler", "plan")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, out, "gpu-in-use: "+fakeGPU1+" has a live assignment (the GPU, allocation alloc-7)")
	list, err := c.api.List(c.ctx(), &apiv1.ListCommandsRequest{TenantId: servertest.TenantA, NodeId: servertest.NodeA1})
	require.NoError(t, err)
	for _, cmd := range list.GetItems() {
		require.NotEqual(t, "gpu.reset", cmd.GetKind(), "nothing is sent while the hold is live")
	}
	for _, l := range readLines(t, calls) {
		require.NotContains(t, l, "--gpu-reset")
	}

	// The hold is released.
	out, stderr, code = c.cli("nodes", "set-spec", servertest.NodeA1, `spec={"holds":[{"gpu":"`+fakeGPU1+`","state":"released","allocation":"alloc-7"}]}`)
	require.Equal(t, 0, code, stderr+out)
	var done *apiv1.Remediation
	testutil.WaitFor(t, 2*time.Minute, "the remediation to finish", func() bool {
		for _, r := range c.plan() {
			if r.GetGpu() == fakeGPU1 && r.GetFinishedAt() != nil {
				done = r
				return true
			}
		}
		return false
	})
	require.Equal(t, remediation.StateDone, done.GetState(), "%s: %s", done.GetOutcome(), done.GetOutcomeMessage())
	require.Equal(t, remediation.OutcomeVerified, done.GetOutcome())
	require.Contains(t, readLines(t, calls), "--gpu-reset -i "+fakeGPU1, "the reset went to nvidia-smi")
	p, ok := c.inventoryPending(fakeGPU1)
	require.True(t, ok)
	require.False(t, p, "the fresh inventory shows the condition cleared")

	// The chain in commands list: the reset under the platform batch, then
	// the fresh inventory.
	reset, verify := c.get(done.GetCommandId()), c.get(done.GetVerifyCommandId())
	require.Equal(t, "gpu.reset", reset.GetKind())
	require.Equal(t, "succeeded", reset.GetState())
	require.Equal(t, done.GetBatchId(), reset.GetBatchId())
	rg := resultOf(reset)["gpus"].([]any)
	require.Equal(t, "ok", rg[0].(map[string]any)["reset"])
	require.Equal(t, "inventory.refresh", verify.GetKind())
	require.Equal(t, "succeeded", verify.GetState())
	out, stderr, code = c.cli("commands", "list", "nodeId="+servertest.NodeA1)
	require.Equal(t, 0, code, stderr)
	require.Contains(t, out, reset.GetId())
	require.Contains(t, out, verify.GetId())
	out, stderr, code = c.cli("reconciler", "batches")
	require.Equal(t, 0, code, stderr)
	require.Regexp(t, done.GetBatchId()+`\s+recorded\s+0/0\s+platform:provision\s+`+servertest.NodeA1+` gpu.reset`, out)

	// The events, in order.
	rows, err := c.srv.Pool.Query(context.Background(), `SELECT topic, payload FROM outbox
		WHERE payload->>'remediationId' = $1 OR payload->>'commandId' IN ($2, $3) OR payload->>'batchId' = $4 ORDER BY id`,
		done.GetId(), reset.GetId(), verify.GetId(), done.GetBatchId())
	require.NoError(t, err)
	var chain []string
	for rows.Next() {
		var (
			topic   string
			payload json.RawMessage
		)
		require.NoError(t, rows.Scan(&topic, &payload))
		var m map[string]any
		require.NoError(t, json.Unmarshal(payload, &m))
		if topic == "command.settled" || topic == "node.command.queued" {
			topic = fmt.Sprintf("%s %v", topic, m["kind"])
		}
		chain = append(chain, topic)
	}
	require.NoError(t, rows.Err())
	require.Equal(t, []string{
		"remediation.planned",
		"remediation.waiting",
		"command.batch.created",
		"node.command.queued gpu.reset",
		"remediation.started",
		"command.settled gpu.reset",
		"node.command.queued inventory.refresh",
		"remediation.verifying",
		"command.settled inventory.refresh",
		"remediation.finished",
	}, chain)
}
