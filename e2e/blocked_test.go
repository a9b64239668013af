package e2e

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/status"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/better-compute/commands/controlplane/server"
	"github.com/better-compute/commands/controlplane/server/servertest"
	"github.com/better-compute/commands/internal/testutil"
	apiv1 "github.com/better-compute/commands/proto/bc/api/v1"
)

// Issue 33: "A command that cannot progress says why, in the API: while a
// command waits on something that only a person can fix (the node runs
// another digest of the kind than the registry; the node does not load the
// kind; a stale pin), commands.get and the events show it on the command
// (a waitingFor or blockedBy with the two digests and the fix), the CLI's
// --wait prints it as soon as it is known and ends with the node's own
// message". One test per case; each fails without the gateway's route.

const examplePlugin = "bc-kind-example"

// blockedCluster is a cluster with example.echo allowlisted; with
// installed, the example plugin is in the node's plugin directory.
func blockedCluster(t *testing.T, installed bool) (*cluster, string) {
	t.Helper()
	c := newCluster(t, func(cfg *server.Config) {
		cfg.Allowlist = append(cfg.Allowlist, "example.echo")
	})
	bin := testutil.BuildBinary(t, "./sdk/example/cmd/"+examplePlugin)
	if installed {
		copyFile(t, bin, filepath.Join(c.plugins, examplePlugin))
	}
	return c, bin
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(to, b, 0o755))
}

// registerExample writes the example plugin's manifests, as `bcd kinds
// --json` prints them without their digests, into the registry's kindsDir
// (version, when set, replaces example.echo's) and restarts the control
// plane to load them.
func registerExample(t *testing.T, c *cluster, bin, version string) {
	t.Helper()
	try := t.TempDir()
	copyFile(t, bin, filepath.Join(try, examplePlugin))
	out, err := exec.Command(c.bcd, "kinds", "--json", "--plugins", try, "--state-dir", t.TempDir()).Output()
	require.NoError(t, err)
	var ms []map[string]any
	require.NoError(t, json.Unmarshal(out, &ms))
	for _, m := range ms {
		delete(m, "digest")
		if m["kind"] == "example.echo" && version != "" {
			// Another version, which does not take the node's 1.0.0.
			m["version"] = version
			delete(m, "compatibleVersions")
		}
	}
	doc, err := json.Marshal(ms)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(c.cfg.KindsDir, "example.json"), doc, 0o600))
	c.restartControlPlane()
}

// nodeDigest is the digest the node reports for kind k (bcd kinds --json).
func nodeDigest(t *testing.T, n *node, k string) string {
	t.Helper()
	out, _, _ := n.bcd("kinds", "--json")
	var ms []map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &ms))
	for _, m := range ms {
		if m["kind"] == k {
			return m["digest"].(string)
		}
	}
	t.Fatalf("the node does not load %s: %s", k, out)
	return ""
}

func waitBlocked(t *testing.T, c *cluster, id, reason string) *apiv1.Command {
	t.Helper()
	var got *apiv1.Command
	testutil.WaitFor(t, 30*time.Second, "command "+id+" to say it is blocked by "+reason, func() bool {
		got = c.get(id)
		return got.GetBlockedBy().GetReason() == reason
	})
	require.Equal(t, "pending", got.GetState())
	require.Equal(t, reason, got.GetWaitingReason())
	require.NotEmpty(t, got.GetBlockedBy().GetFix())
	return got
}

// waitingEvent finds the node.command.waiting event the gateway published
// for the command (what wakes the CLI's --wait).
func waitingEvent(t *testing.T, c *cluster, id string) map[string]any {
	t.Helper()
	var payload []byte
	require.NoError(t, c.srv.Pool.QueryRow(t.Context(),
		`SELECT payload FROM outbox WHERE topic = 'node.command.waiting' AND payload->>'commandId' = $1 ORDER BY id LIMIT 1`, id).Scan(&payload))
	var ev map[string]any
	require.NoError(t, json.Unmarshal(payload, &ev))
	return ev
}

// Case 1: the node runs another digest of the kind than the registry. The
// CLI's --wait prints the block (both digests, the fix) while the command
// waits, and ends with why it expired; commands.get keeps the block.
func TestE2E_BlockedByAKindMismatchNamesBothDigestsAndTheCLIWaitPrintsIt(t *testing.T) {
	c, bin := blockedCluster(t, true)
	registerExample(t, c, bin, "1.1.0") // the node runs 1.0.0
	n := c.join()
	n.start()

	out, errOut, code := c.cli("commands", "run", "nodeId="+servertest.NodeA1, "kind=example.echo", `payload={"message":"held"}`,
		"notAfterSeconds=10", "--wait", "--poll", "30s")
	require.Equal(t, 3, code, "stdout:\n%s\nstderr:\n%s", out, errOut)
	i := strings.Index(errOut, "blocked (kind-mismatch): node "+servertest.NodeA1+" runs another manifest of example.echo (1.0.0")
	require.GreaterOrEqual(t, i, 0, "--wait prints the block while it waits:\n%s", errOut)
	require.Contains(t, errOut, "fix: register the node's manifest")
	end := strings.Index(errOut, "ended expired (not_after): it waited:")
	require.Greater(t, end, i, "and ends with why it expired, after:\n%s", errOut)

	id := strings.Fields(errOut[strings.Index(errOut, "cmd_"):])[0]
	got := c.get(id)
	require.Equal(t, "expired", got.GetState())
	require.Equal(t, "not_after", got.GetReason())
	require.Contains(t, got.GetMessage(), "runs another manifest of example.echo", "the message is not null once it expired")
	b := got.GetBlockedBy()
	require.Equal(t, "kind-mismatch", b.GetReason(), "the block stays on the expired command")
	require.Equal(t, nodeDigest(t, n, "example.echo"), b.GetNodeDigest())
	require.Equal(t, "1.0.0", b.GetNodeVersion())
	require.Equal(t, "1.1.0", b.GetRegistryVersion())
	k, err := apiv1.NewKindsClient(c.conn).Get(c.ctx(), &apiv1.GetKindRequest{Name: "example.echo"})
	require.NoError(t, err)
	require.Equal(t, k.GetDigest(), b.GetRegistryDigest())
	require.NotEqual(t, b.GetNodeDigest(), b.GetRegistryDigest())
	require.Equal(t, "kind-mismatch", waitingEvent(t, c, id)["reason"])

	node, err := apiv1.NewNodesClient(c.conn).Get(c.ctx(), &apiv1.GetNodeRequest{TenantId: servertest.TenantA, NodeId: servertest.NodeA1})
	require.NoError(t, err)
	var echo *apiv1.NodeKind
	for _, k := range node.GetKinds() {
		if k.GetKind() == "example.echo" {
			echo = k
		}
	}
	require.NotNil(t, echo, "nodes get lists the kinds of the node's Hello: %v", node.GetKinds())
	require.Equal(t, "mismatch", echo.GetStatus())
	require.Equal(t, "1.0.0", echo.GetVersion())
}

// Case 2: the node does not load the kind. The command waits, saying so,
// then runs once the plugin is installed and bcd reloaded: nothing expires.
func TestE2E_BlockedByAKindTheNodeDoesNotLoadRunsOnceThePluginIsInstalled(t *testing.T) {
	c, bin := blockedCluster(t, false)
	// "Not registered" and "not API-runnable" are different reasons.
	p, err := structpb.NewStruct(map[string]any{"message": "early"})
	require.NoError(t, err)
	_, err = c.api.Run(c.ctx(), &apiv1.RunCommandRequest{TenantId: servertest.TenantA, NodeId: servertest.NodeA1, Kind: "example.echo", Payload: p})
	require.Equal(t, codes.Unimplemented, status.Code(err), "%v", err)
	require.Contains(t, err.Error(), "no manifest of it is registered")
	require.Contains(t, err.Error(), "kindsDir")
	require.Equal(t, "not-registered", errorReason(t, err))

	registerExample(t, c, bin, "")
	n := c.join()
	n.start()
	cmd := c.run("example.echo", map[string]any{"message": "after install"})
	got := waitBlocked(t, c, cmd.GetId(), "kind-not-loaded")
	require.Contains(t, got.GetBlockedBy().GetMessage(), "node "+servertest.NodeA1+" does not load example.echo")
	require.Contains(t, got.GetBlockedBy().GetFix(), "pluginDir")

	copyFile(t, bin, filepath.Join(c.plugins, examplePlugin))
	before := n.sessions()
	_, errs, code := n.bcd("reload")
	require.Equal(t, 0, code, "bcd reload: %s", errs)
	n.waitSession(before)
	done := c.waitState(cmd.GetId(), "succeeded")
	require.Contains(t, done.GetResult().String(), "after install")
	require.Nil(t, done.GetBlockedBy(), "a command that went on carries no block")
}

// Case 3: a stale pin after a bcd restart. The plugin file changed, the
// pin in bcd's config did not; bcd refuses the plugin at its start, and the
// command names the file, both SHA-256s and the fix, instead of ending
// rejected UNSUPPORTED. Fixing the pin and reloading bcd runs it.
func TestE2E_BlockedByAStalePinAfterABcdRestartNamesBothDigests(t *testing.T) {
	c, bin := blockedCluster(t, true)
	registerExample(t, c, bin, "")
	pinned := fileSum(t, filepath.Join(c.plugins, examplePlugin))
	n := c.join()
	writePin := func(sum string) {
		require.NoError(t, os.WriteFile(n.config, []byte("role: node\nlogLevel: debug\npluginSha256:\n  "+examplePlugin+": "+sum+"\n"), 0o600))
	}
	writePin(pinned)
	n.start()
	c.waitState(c.run("example.echo", map[string]any{"message": "pinned"}).GetId(), "succeeded")
	n.stop()

	// A new build of the plugin (here: the same program with bytes after
	// its end, which an ELF loader ignores) lands without its pin.
	f, err := os.OpenFile(filepath.Join(c.plugins, examplePlugin), os.O_APPEND|os.O_WRONLY, 0)
	require.NoError(t, err)
	_, err = f.WriteString("\nrebuilt\n")
	require.NoError(t, err)
	require.NoError(t, f.Close())
	found := fileSum(t, filepath.Join(c.plugins, examplePlugin))
	n.start()

	out, errOut, code := c.cli("commands", "run", "nodeId="+servertest.NodeA1, "kind=example.echo", `payload={"message":"stale"}`,
		"notAfterSeconds=10", "--wait", "--poll", "30s")
	require.Equal(t, 3, code, "stdout:\n%s\nstderr:\n%s", out, errOut)
	require.Contains(t, errOut, "blocked (plugin-refused): node "+servertest.NodeA1+" does not load example.echo: its bcd refused the plugin "+examplePlugin)
	require.Contains(t, errOut, "fix: on the node, check the file")
	id := strings.Fields(errOut[strings.Index(errOut, "cmd_"):])[0]
	got := c.get(id)
	require.Equal(t, "expired", got.GetState(), "held, never sent to be rejected UNSUPPORTED")
	b := got.GetBlockedBy()
	require.Equal(t, "plugin-refused", b.GetReason())
	require.Equal(t, examplePlugin, b.GetPlugin())
	require.Equal(t, pinned, b.GetPinnedSha256())
	require.Equal(t, found, b.GetFoundSha256())
	require.Contains(t, b.GetFix(), "pluginSha256."+examplePlugin+": "+found)

	// The fix, as it says: pin the new file and reload bcd.
	writePin(found)
	before := n.sessions()
	_, errs, code := n.bcd("reload")
	require.Equal(t, 0, code, "bcd reload: %s", errs)
	n.waitSession(before)
	c.waitState(c.run("example.echo", map[string]any{"message": "re-pinned"}).GetId(), "succeeded")
}

func fileSum(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// errorReason is the API error's reason detail (ErrorInfo metadata), read
// as any client reads it: from the gRPC status's details.
func errorReason(t *testing.T, err error) string {
	t.Helper()
	st, ok := status.FromError(err)
	require.True(t, ok, "%v", err)
	for _, d := range st.Details() {
		if ei, isInfo := d.(*errdetails.ErrorInfo); isInfo {
			return ei.GetMetadata()["reason"]
		}
	}
	t.Fatalf("no ErrorInfo in %v", err)
	return ""
}
