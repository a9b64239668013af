package e2e

// End to end with signing on (pki.commandSigning): the real bc-server
// registering the first-party kinds as bc-server does (kinds.FirstParty), a
// real `bcd run` joined with `bcd join` (so it holds the join answer's trust
// bundle), and the real first-party plugin binaries on go-nvml's mock
// dgxh200 GPUs and fake tools the test writes (nvidia-smi, dcgmi,
// journalctl), and a private dbus-daemon with a fake logind.
//
// The spec (commands.md, "Signatures and attested results"): "Once the
// daemon's trust bundle holds command-signing roots, it rejects every
// command without a valid signature with BAD_SIGNATURE, whatever its kind",
// and "For attested kinds the node signs its result with its node key".

import (
	"bufio"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"
	"github.com/hashicorp/go-hclog"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/better-compute/commands/bcd/conditions"
	"github.com/better-compute/commands/controlplane/commands/queue"
	"github.com/better-compute/commands/controlplane/server"
	"github.com/better-compute/commands/controlplane/server/servertest"
	"github.com/better-compute/commands/internal/testutil"
	agentv1 "github.com/better-compute/commands/proto/bc/agent/v1"
	apiv1 "github.com/better-compute/commands/proto/bc/api/v1"
)

// firstPartyPlugins are the plugin binaries bcd ships (packaging puts them
// in bin/plugins under these names).
var firstPartyPlugins = []string{
	"./plugins/nvml/cmd/bc-kind-nvml",
	"./plugins/logs/cmd/bc-kind-logs",
	"./plugins/gpureset/cmd/bc-kind-gpureset",
	"./plugins/dcgm/cmd/bc-kind-dcgm",
	"./plugins/reboot/cmd/bc-kind-reboot",
}

// The GPUs the fake nvidia-smi lists (gpu.reset and diag.dcgm ask it).
const (
	fakeGPU0 = "GPU-934a71d6-e50c-86a3-f752-3743a8c1bbb2"
	fakeGPU1 = "GPU-1f2e3d4c-5b6a-7988-a7b6-c5d4e3f2a1b0"
)

// newSignedCluster starts a control plane with command signing on
// (servertest.Signing) whose registry holds the first-party manifests, and a
// plugin directory with the first-party plugins alone.
//
// servertest.Start registers its own test manifests of inventory.refresh,
// diag.nvml, logs.collect, node.reboot and gpu.reset (the same versions,
// other digests than the plugins serve, so the gateway would hold their
// commands as kind-mismatch). So the test stops that server and starts one
// built as bc-server builds it (server.New with no registry: the
// first-party manifests), on the same database, node CA and addresses. The
// HTTP listener keeps its port so that the dir blob store's presigned URLs
// (logs.collect's upload) name it.
func newSignedCluster(t *testing.T) *cluster {
	t.Helper()
	signing, _ := servertest.Signing(t)
	return newFirstPartyCluster(t, signing)
}

// newFirstPartyCluster is newSignedCluster with adjust (nil: none) in place
// of servertest.Signing: without it, a control plane that does not sign.
func newFirstPartyCluster(t *testing.T, adjust func(*server.Config)) *cluster {
	t.Helper()
	c := &cluster{t: t, bcd: testutil.BuildBinary(t, "./bcd/cmd/bcd"), plugins: t.TempDir()}
	for _, pkg := range firstPartyPlugins {
		src := testutil.BuildBinary(t, pkg)
		b, err := os.ReadFile(src)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(c.plugins, filepath.Base(pkg)), b, 0o755))
	}
	first := servertest.Start(t, adjust)
	require.NoError(t, first.Stop())

	cfg := first.Config
	cfg.GRPCListen, cfg.Gateway.Listen, cfg.HTTPListen = first.GRPC, first.Gateway, first.HTTP
	sb := *cfg.SupportBundles
	dir := *sb.Blob.Dir
	dir.BaseURL = "http://" + first.HTTP + "/v1/blobs"
	sb.Blob.Dir = &dir
	cfg.SupportBundles = &sb
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
	testutil.WaitFor(t, 30*time.Second, "the first-party server to be ready", func() bool {
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

// enqueue queues a command through the server's own queue, which signs it,
// as a module does for the kinds commands.run refuses (gpu.reset and
// diag.dcgm are not API-runnable).
func (c *cluster) enqueue(k string, payload any) string {
	c.t.Helper()
	b, err := json.Marshal(payload)
	require.NoError(c.t, err)
	ctx := context.Background()
	var cmd queue.Command
	require.NoError(c.t, pgx.BeginFunc(ctx, c.srv.Pool, func(tx pgx.Tx) error {
		var err error
		cmd, _, err = c.srv.Server.Queue().Enqueue(ctx, tx, queue.EnqueueParams{TenantID: servertest.TenantA, NodeID: servertest.NodeA1, Kind: k, Payload: b})
		return err
	}))
	return cmd.ID
}

// succeeded waits for the command to succeed (failing at once, with its
// reason, when it settles otherwise) and checks that it went out signed.
func (c *cluster) succeeded(id string) *apiv1.Command {
	c.t.Helper()
	var got *apiv1.Command
	testutil.WaitFor(c.t, 90*time.Second, "command "+id+" to settle", func() bool {
		got = c.get(id)
		switch got.GetState() {
		case "succeeded":
			return true
		case "failed", "cancelled", "expired":
			c.t.Fatalf("%s %s ended %s: %s: %s (result %v)", got.GetKind(), id, got.GetState(), got.GetReason(), got.GetMessage(), got.GetResult())
		}
		return false
	})
	require.True(c.t, got.GetSigned(), "%s %s went out signed (commands.get shows signed: true)", got.GetKind(), id)
	require.Empty(c.t, got.GetWaitingReason())
	return got
}

func resultOf(cmd *apiv1.Command) map[string]any { return cmd.GetResult().GetStructValue().AsMap() }

// nodeTrust waits until nodes.get shows that the node holds the trust
// bundle: its TrustBundle condition True and a trustVersion.
func (c *cluster) nodeTrust() *apiv1.Node {
	c.t.Helper()
	nodes := apiv1.NewNodesClient(c.conn)
	var got *apiv1.Node
	testutil.WaitFor(c.t, 30*time.Second, "the node's TrustBundle condition", func() bool {
		n, err := nodes.Get(c.ctx(), &apiv1.GetNodeRequest{TenantId: servertest.TenantA, NodeId: servertest.NodeA1})
		if err != nil {
			return false
		}
		got = n
		for _, cond := range n.GetConditions() {
			if cond.GetType() == conditions.TypeTrustBundle {
				return cond.GetStatus() == "True"
			}
		}
		return false
	})
	require.Positive(c.t, got.GetTrustVersion(), "nodes.get shows the bundle version the node holds")
	return got
}

// nodeEnv is a node's pluginEnv; configure writes it into bcd.yaml with
// the mock GPUs (nvmlSource mock:dgxh200), as scripts/lib/local-stack.sh
// configures the demo's nodes. bcd reads it when it starts.
type nodeEnv map[string]string

func (n *node) configure(env nodeEnv) {
	n.c.t.Helper()
	var b strings.Builder
	b.WriteString("role: node\nlogLevel: debug\nnvmlSource: \"mock:dgxh200\"\npluginEnv:\n")
	keys := make([]string, 0, len(env))
	for k := range env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(&b, "  %s: %q\n", k, env[k])
	}
	require.NoError(n.c.t, os.WriteFile(n.config, []byte(b.String()), 0o600))
}

// writeExec writes an executable script.
func writeExec(t *testing.T, path, script string) string {
	t.Helper()
	require.NoError(t, os.WriteFile(path, []byte(script), 0o755))
	return path
}

// baseEnv is what every node of these tests gets: the kernel log is an
// empty file (no XIDs from the host the test runs on), journalctl a fake
// that prints one line, and logs.collect assembles its bundle in a temp
// dir, as the demo's nodes do.
func baseEnv(t *testing.T) nodeEnv {
	t.Helper()
	d := t.TempDir()
	kmsg := filepath.Join(d, "kmsg")
	require.NoError(t, os.WriteFile(kmsg, nil, 0o644))
	journalctl := writeExec(t, filepath.Join(d, "journalctl"), "#!/bin/sh\necho '2026-01-01T00:00:00+0000 node bcd[1]: a line from the fake journalctl'\n")
	return nodeEnv{"BCD_KMSG_PATH": kmsg, "BCD_JOURNALCTL": journalctl, "BCD_LOGS_TMPDIR": t.TempDir()}
}

// fakeSmi writes a fake nvidia-smi for gpu.reset and diag.dcgm: two idle
// healthy GPUs with persistence mode on, whose resets succeed. It records
// every call in calls.log beside it.
func fakeSmi(t *testing.T) (path, calls string) {
	t.Helper()
	d := t.TempDir()
	script := `#!/bin/sh
printf '%s\n' "$*" >> "$(dirname "$0")/calls.log"
last=""
for a in "$@"; do last=$a; done
case "$last" in
` + fakeGPU0 + `) idx=0 bus=00000000:3B:00.0 ;;
` + fakeGPU1 + `) idx=1 bus=00000000:86:00.0 ;;
esac
case "$*" in
"--query-gpu=index,uuid,pci.bus_id --format=csv,noheader,nounits")
  printf '0, ` + fakeGPU0 + `, 00000000:3B:00.0\n1, ` + fakeGPU1 + `, 00000000:86:00.0\n' ;;
"--query-compute-apps=gpu_uuid,pid,used_memory --format=csv,noheader,nounits") ;;
"--query-remapped-rows=gpu_uuid,remapped_rows.correctable,remapped_rows.uncorrectable,remapped_rows.pending,remapped_rows.failure --format=csv,noheader,nounits")
  printf '` + fakeGPU0 + `, 0, 0, No, No\n` + fakeGPU1 + `, 0, 0, No, No\n' ;;
"--query-gpu=uuid,persistence_mode --format=csv,noheader,nounits -i "*) printf '%s, Enabled\n' "$last" ;;
"--query-gpu=index,uuid,pci.bus_id,ecc.errors.uncorrected.volatile.total --format=csv,noheader,nounits -i "*)
  printf '%s, %s, %s, 0\n' "$idx" "$last" "$bus" ;;
"-pm 0 -i "*) printf 'Disabled persistence mode for GPU %s.\nAll done.\n' "$last" ;;
"-pm 1 -i "*) printf 'Enabled persistence mode for GPU %s.\nAll done.\n' "$last" ;;
"--gpu-reset -i "*) printf 'GPU %s was successfully reset.\nAll done.\n' "$last" ;;
*) echo "fake nvidia-smi: no answer scripted for: $*" >&2; exit 2 ;;
esac
`
	return writeExec(t, filepath.Join(d, "nvidia-smi"), script), filepath.Join(d, "calls.log")
}

// fakeDcgmi writes a fake dcgmi that answers level 1's calls and `dcgmi
// diag -r 3 -j` with the real DCGM 3 captures in testdata.
func fakeDcgmi(t *testing.T) string {
	t.Helper()
	d := t.TempDir()
	for _, f := range []string{"diag-r3-j-dcgm3-tesla-t4-pass.json", "discovery-l-tesla-t4-1gpu.txt"} {
		b, err := os.ReadFile(filepath.Join("testdata", f))
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(d, f), b, 0o644))
	}
	script := `#!/bin/sh
d=$(dirname "$0")
printf '%s\n' "$*" >> "$d/calls.log"
case "$*" in
"--version") printf '\ndcgmi  version: 3.3.9\n\n' ;;
"discovery -l") cat "$d/discovery-l-tesla-t4-1gpu.txt" ;;
"diag -r 3 -j") cat "$d/diag-r3-j-dcgm3-tesla-t4-pass.json" ;;
*) echo "fake dcgmi: no answer scripted for: $*" >&2; exit 2 ;;
esac
`
	return writeExec(t, filepath.Join(d, "dcgmi"), script)
}

// toolEnv adds the fake nvidia-smi and dcgmi to env, and an empty /proc
// (no process holds a GPU device node) for the in-use check.
func toolEnv(t *testing.T, env nodeEnv) (nodeEnv, string) {
	t.Helper()
	smiPath, calls := fakeSmi(t)
	out := nodeEnv{}
	for k, v := range env {
		out[k] = v
	}
	out["BCD_NVIDIA_SMI"] = smiPath
	out["BCD_DCGMI"] = fakeDcgmi(t)
	out["BCD_PROC_ROOT"] = t.TempDir()
	return out, calls
}

func readLines(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return nil
	}
	require.NoError(t, err)
	return strings.Split(strings.TrimRight(string(b), "\n"), "\n")
}

// signedNode joins the node with `bcd join` and checks that it took the join
// answer's trust bundle.
func (c *cluster) signedNode() *node {
	c.t.Helper()
	n := c.join()
	require.Contains(c.t, n.joinOut, "(commands must be signed)", "bcd join stores the join answer's trust bundle")
	_, err := os.Stat(filepath.Join(n.state, "trust.json"))
	require.NoError(c.t, err)
	return n
}

// "When the server is given pki.commandSigning ..., every command is signed
// by a 24-hour worker key that root certifies, and JoinResponse and Welcome
// carry the trust bundle"; "Once the daemon's trust bundle holds
// command-signing roots, it rejects every command without a valid signature
// ..., whatever its kind". Every first-party kind runs signed on a node
// that holds the bundle, and succeeds.
//
// The node runs in two configurations, restarted in between: bcd's
// pluginEnv goes to every plugin alike, and BCD_NVIDIA_SMI=mock (the nvml
// plugin's built-in mock, which bcd exec and the e2e tests use; the demo runs bin/tools/mocknvidiasmi instead) is, for gpu.reset and
// diag.dcgm, the path of the nvidia-smi to execute. So the NVML kinds run
// with BCD_NVIDIA_SMI=mock, the tool kinds with a fake nvidia-smi there.
func TestE2E_SignedEveryFirstPartyKindRuns(t *testing.T) {
	c := newSignedCluster(t)
	n := c.signedNode()
	env := baseEnv(t)
	env["BCD_NVIDIA_SMI"] = "mock"
	n.configure(env)
	n.start()
	c.nodeTrust()

	// inventory.refresh and diag.nvml: the mock dgxh200's eight H200s.
	inv := c.succeeded(c.run("inventory.refresh", map[string]any{}).GetId())
	gpus, _ := resultOf(inv)["gpus"].([]any)
	require.Len(t, gpus, 8, "the mock dgxh200's GPUs")
	diag := c.succeeded(c.run("diag.nvml", map[string]any{"expectedCount": 8}).GetId())
	require.Equal(t, "pass", resultOf(diag)["status"])

	// logs.collect: the control plane fills the upload URL of its dir blob
	// store; the plugin uploads the bundle there.
	logs := c.succeeded(c.run("logs.collect", map[string]any{"since": "1h"}).GetId())
	require.NotEmpty(t, logs.GetBundleKey())
	require.NotEmpty(t, resultOf(logs)["sha256"], "the bundle's digest: %v", resultOf(logs))

	// gpu.reset and diag.dcgm, not API-runnable: through the server's queue.
	n.stop()
	tools, smiCalls := toolEnv(t, env)
	n.configure(tools)
	n.start()
	reset := c.succeeded(c.enqueue("gpu.reset", map[string]any{"gpus": []string{fakeGPU1}}))
	rg := resultOf(reset)["gpus"].([]any)
	require.Len(t, rg, 1)
	require.Equal(t, "ok", rg[0].(map[string]any)["reset"])
	require.Equal(t, true, rg[0].(map[string]any)["healthy"])
	require.Contains(t, readLines(t, smiCalls), "--gpu-reset -i "+fakeGPU1, "the reset went to nvidia-smi")

	dcgm := c.succeeded(c.enqueue("diag.dcgm", map[string]any{"level": 3}))
	require.Equal(t, "pass", resultOf(dcgm)["overall"])
	require.NotEmpty(t, dcgm.GetNodeSig(), "diag.dcgm is attested: the node signed its result")
	c.nodeTrust()
}

// "the node signs its result with its node key ... over the command id,
// the state and the SHA-256 of the result"; `better-compute commands verify`
// "exits 3 for a forged, altered or unattested result". diag.dcgm's result
// verifies against the node CA; altered in the database it does not.
func TestE2E_SignedAttestedResultVerifiesAndTamperedFails(t *testing.T) {
	c := newSignedCluster(t)
	n := c.signedNode()
	env, _ := toolEnv(t, baseEnv(t))
	n.configure(env)
	n.start()
	id := c.succeeded(c.enqueue("diag.dcgm", map[string]any{"level": 3})).GetId()
	ca := filepath.Join(c.srv.CADir, "ca.pem")
	verify := func() (string, int) {
		out, errs, code := c.cli("commands", "verify", id, "nodeId="+servertest.NodeA1, "--node-ca", ca)
		return out + errs, code
	}
	out, code := verify()
	require.Equal(t, 0, code, out)
	require.Regexp(t, `SIGNED\s+true`, out)
	require.Contains(t, out, "verified: the node signed this result")

	ctx := context.Background()
	var raw []byte
	require.NoError(t, c.srv.Pool.QueryRow(ctx, `SELECT result_bytes FROM commands WHERE id = $1`, id).Scan(&raw))
	var doc map[string]any
	require.NoError(t, json.Unmarshal(raw, &doc))
	require.Equal(t, "pass", doc["overall"])

	// The result shown altered, the node's bytes kept.
	_, err := c.srv.Pool.Exec(ctx, `UPDATE commands SET result = jsonb_set(result, '{overall}', '"fail"') WHERE id = $1`, id)
	require.NoError(t, err)
	out, code = verify()
	require.Equal(t, 3, code, out)
	require.Contains(t, out, "NOT VERIFIED")
	require.Contains(t, out, "the result shown is not the result bytes the node sent")

	// A consistent forgery: the result, its bytes and their SHA-256 all
	// rewritten; only the node's signature stands against it.
	doc["overall"] = "fail"
	forged, err := json.Marshal(doc)
	require.NoError(t, err)
	sum := sha256.Sum256(forged)
	_, err = c.srv.Pool.Exec(ctx, `UPDATE commands SET result = $2::jsonb, result_bytes = $3, result_sha256 = $4 WHERE id = $1`,
		id, string(forged), forged, sum[:])
	require.NoError(t, err)
	out, code = verify()
	require.Equal(t, 3, code, out)
	require.Contains(t, out, "NOT VERIFIED")
	require.Contains(t, out, "signature does not verify")
}

// fakeLogind is org.freedesktop.login1.Manager as far as node.reboot uses
// it: Reboot(interactive) accepted and counted.
type fakeLogind struct{ calls atomic.Int32 }

func (f *fakeLogind) Reboot(interactive bool) *dbus.Error {
	f.calls.Add(1)
	return nil
}

// startLogind starts a private dbus-daemon with a fake logind on it and
// returns the bus address; t.Skip when dbus-daemon is missing.
func startLogind(t *testing.T) (string, *fakeLogind) {
	t.Helper()
	bin, err := exec.LookPath("dbus-daemon")
	if err != nil {
		t.Skip("dbus-daemon is not installed: node.reboot needs a bus")
	}
	cmd := exec.Command(bin, "--session", "--nofork", "--print-address")
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	lines := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(stdout).ReadString('\n')
		lines <- strings.TrimSpace(line)
	}()
	var addr string
	select {
	case addr = <-lines:
	case <-time.After(30 * time.Second):
		t.Fatal("dbus-daemon printed no address within 30s")
	}
	require.NotEmpty(t, addr)
	conn, err := dbus.Connect(addr)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	f := &fakeLogind{}
	require.NoError(t, conn.Export(f, "/org/freedesktop/login1", "org.freedesktop.login1.Manager"))
	reply, err := conn.RequestName("org.freedesktop.login1", dbus.NameFlagDoNotQueue)
	require.NoError(t, err)
	require.Equal(t, dbus.RequestNameReplyPrimaryOwner, reply)
	return addr, f
}

// node.reboot signed, the reboot dance of TestE2E_RebootByNewBootID with
// the real plugin: logind accepts the reboot, bcd restarts on a new boot id
// and the command completes succeeded with rebooted: true.
func TestE2E_SignedNodeReboot(t *testing.T) {
	addr, logind := startLogind(t)
	c := newSignedCluster(t)
	n := c.signedNode()
	env := baseEnv(t)
	env["BCD_NVIDIA_SMI"] = "mock"
	env["BCD_SYSTEM_BUS_ADDRESS"] = addr
	n.configure(env)
	n.start()
	c.nodeTrust()

	cmd := c.run("node.reboot", map[string]any{})
	testutil.WaitFor(t, 60*time.Second, "logind to be asked for the reboot", func() bool { return logind.calls.Load() > 0 })
	c.waitState(cmd.GetId(), "running")
	n.stop()
	require.NoError(t, os.WriteFile(n.boot, []byte("boot-2\n"), 0o600))
	n.start()

	got := c.succeeded(cmd.GetId())
	var rebooted bool
	require.NoError(t, c.srv.Pool.QueryRow(context.Background(), `SELECT rebooted FROM commands WHERE id = $1`, cmd.GetId()).Scan(&rebooted))
	require.True(t, rebooted, "rebooted: true (reason %q)", got.GetReason())
	require.Equal(t, int32(1), logind.calls.Load(), "one reboot asked for")
	require.Equal(t, 1, c.settledCount(cmd.GetId()))
}

// copyDir copies a directory tree (a stopped bcd's state directory).
func copyDir(t *testing.T, src, dst string) {
	t.Helper()
	require.NoError(t, filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(target, 0o700)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(target, b, 0o600)
	}))
}

// oldCertCreds are TLS credentials from a state directory's tls/ files.
func oldCertCreds(t *testing.T, state string) credentials.TransportCredentials {
	t.Helper()
	dir := filepath.Join(state, "tls")
	pair, err := tls.LoadX509KeyPair(filepath.Join(dir, "node.crt"), filepath.Join(dir, "node.key"))
	require.NoError(t, err)
	ca, err := os.ReadFile(filepath.Join(dir, "ca.crt"))
	require.NoError(t, err)
	roots := x509.NewCertPool()
	require.True(t, roots.AppendCertsFromPEM(ca))
	return credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{pair}, RootCAs: roots, MinVersion: tls.VersionTLS12})
}

// "A re-join supersedes the node's earlier certificate. A session with a
// superseded or revoked certificate is refused (PERMISSION_DENIED)"
// (docs/trust.md): after `bcd join` again, a bcd on the old certificate is
// refused, and so is a session opened with it directly; the re-joined
// node's session stays and runs a signed command.
func TestE2E_SignedOldCertificateRefusedAfterRejoin(t *testing.T) {
	c := newSignedCluster(t)
	n := c.signedNode()
	env := baseEnv(t)
	env["BCD_NVIDIA_SMI"] = "mock"
	n.configure(env)
	n.start()
	c.succeeded(c.run("inventory.refresh", map[string]any{}).GetId())

	// The old state directory, certificate and all, kept aside; then the
	// node joins again with a new token.
	n.stop()
	oldState := t.TempDir()
	copyDir(t, n.state, oldState)
	out, errs, code := n.bcd("join", "--token", c.srv.JoinToken(t, servertest.NodeA1), "--server", c.srv.Gateway,
		"--ca-file", filepath.Join(c.srv.CADir, "ca.pem"))
	require.Equal(t, 0, code, "bcd join again: %s", errs)
	require.Contains(t, out, "(commands must be signed)")
	n.start()
	c.nodeTrust()
	ended := strings.Count(n.logs.String(), "session ended")

	// A second bcd on the old certificate: every session it opens is refused.
	old := &node{c: c, state: oldState, boot: n.boot, config: n.config, logs: &lockedBuffer{}}
	t.Cleanup(func() {
		old.kill()
		if t.Failed() {
			t.Logf("old bcd logs:\n%s", old.logs.String())
		}
	})
	old.launch()
	testutil.WaitFor(t, 60*time.Second, "the old certificate's session to be refused", func() bool {
		return strings.Contains(old.logs.String(), "superseded")
	})
	require.Zero(t, old.sessions(), "no session opens on the old certificate")
	old.kill()

	// The same, seen on the wire: PERMISSION_DENIED, superseded.
	conn, err := grpc.NewClient(c.srv.Gateway, grpc.WithTransportCredentials(oldCertCreds(t, oldState)))
	require.NoError(t, err)
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	stream, err := agentv1.NewSessionClient(conn).Connect(ctx)
	require.NoError(t, err)
	_ = stream.Send(&agentv1.NodeMessage{Msg: &agentv1.NodeMessage_Hello{Hello: &agentv1.Hello{NodeId: servertest.NodeA1, Role: "node"}}})
	_, err = stream.Recv()
	require.Equal(t, codes.PermissionDenied, status.Code(err), "%v", err)
	require.Contains(t, status.Convert(err).Message(), "superseded")

	// The re-joined node kept its session and runs signed commands.
	c.succeeded(c.run("diag.nvml", map[string]any{"expectedCount": 8}).GetId())
	require.Equal(t, ended, strings.Count(n.logs.String(), "session ended"), "the re-joined node's session stayed open")
	out, errs, code = c.cli("nodes", "certs", servertest.NodeA1)
	require.Equal(t, 0, code, errs)
	require.Contains(t, out, "superseded")
	require.Contains(t, out, "current")
}
