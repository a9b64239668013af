package e2e

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/controlplane/front/api"
	"github.com/better-compute/commands/controlplane/server"
	"github.com/better-compute/commands/internal/testutil"
	apiv1 "github.com/better-compute/commands/proto/bc/api/v1"
)

// exampleCluster is a cluster whose node also runs the SDK guide's example
// plugin, with example.echo allowlisted.
func exampleCluster(t *testing.T) (*cluster, string) {
	t.Helper()
	c := newCluster(t, func(cfg *server.Config) {
		cfg.Allowlist = append(cfg.Allowlist, "example.echo")
	})
	src := testutil.BuildBinary(t, "./sdk/example/cmd/bc-kind-example")
	b, err := os.ReadFile(src)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(c.plugins, filepath.Base(src)), b, 0o755))
	return c, c.cfg.KindsDir
}

// The SDK guide's section 7, run as written: `bcd kinds --json` piped
// through `jq 'map(del(.digest))'` into the control plane's kinds dir. The
// command must run on the node, not sit pending until it expires (the
// registry's digest of the file must equal the node's).
func TestE2E_SDKGuideSection7RegistersAKindThatRuns(t *testing.T) {
	if _, err := exec.LookPath("jq"); err != nil {
		t.Skip("jq is not installed: the guide's step uses it")
	}
	c, kindsDir := exampleCluster(t)
	n := c.join()
	// The guide's try-out directory holds the vendor's plugin alone.
	try := t.TempDir()
	src := testutil.BuildBinary(t, "./sdk/example/cmd/bc-kind-example")
	b, err := os.ReadFile(src)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(try, filepath.Base(src)), b, 0o755))
	state := t.TempDir()
	script := c.bcd + " kinds --json --plugins " + try + " --state-dir " + state +
		" | jq 'map(del(.digest))' > " + filepath.Join(kindsDir, "acme.json")
	out, err := exec.Command("bash", "-o", "pipefail", "-c", script).CombinedOutput()
	require.NoError(t, err, "the guide's step: %s", out)
	c.restartControlPlane()
	n.start()

	cmd := c.run("example.echo", map[string]any{"message": "hello from the guide"})
	got := c.waitState(cmd.GetId(), "succeeded")
	require.Empty(t, got.GetWaitingReason())
	require.Contains(t, got.GetResult().String(), "hello from the guide")
}

// "A mismatch is never silent: while a kind's manifest differs between the
// node and the registry, the command stays pending with a visible waiting
// reason in commands.get and list (naming the kind, both digests or
// versions), the node shows a condition".
func TestE2E_AKindManifestMismatchIsVisible(t *testing.T) {
	c, kindsDir := exampleCluster(t)
	n := c.join()
	// The registry holds another manifest of example.echo than the node runs.
	out, _, code := n.bcd("kinds", "--json")
	require.Equal(t, 0, code)
	var ms []map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &ms))
	var keep []map[string]any
	for _, m := range ms {
		if m["kind"] == "example.echo" {
			delete(m, "digest")
			// Another version, which does not declare the node's 1.0.0
			// compatible (example.echo's ^1 would dispatch to it).
			m["version"] = "1.1.0"
			delete(m, "compatibleVersions")
			keep = append(keep, m)
		}
	}
	require.Len(t, keep, 1)
	doc, err := json.Marshal(keep)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(kindsDir, "acme.json"), doc, 0o600))
	c.restartControlPlane()
	n.start()

	cmd := c.run("example.echo", map[string]any{"message": "held"})
	var got *apiv1.Command
	testutil.WaitFor(t, 30*time.Second, "the command to say why it waits", func() bool {
		got = c.get(cmd.GetId())
		return got.GetWaitingReason() != ""
	})
	require.Equal(t, "pending", got.GetState())
	require.Equal(t, "kind-mismatch", got.GetWaitingReason())
	require.Contains(t, got.GetWaitingMessage(), "example.echo")
	require.Contains(t, got.GetWaitingMessage(), "1.1.0")
	list, err := c.api.List(c.ctx(), &apiv1.ListCommandsRequest{TenantId: "tenant_a", NodeId: "node_a1"})
	require.NoError(t, err)
	require.Equal(t, "kind-mismatch", list.GetItems()[0].GetWaitingReason())

	node, err := apiv1.NewNodesClient(c.conn).Get(c.ctx(), &apiv1.GetNodeRequest{TenantId: "tenant_a", NodeId: "node_a1"})
	require.NoError(t, err)
	var cond *apiv1.Condition
	for _, x := range node.GetConditions() {
		if x.GetType() == api.ConditionKindsMatchRegistry {
			cond = x
		}
	}
	require.NotNil(t, cond, "the node shows a condition")
	require.Equal(t, "False", cond.GetStatus())
	require.Contains(t, cond.GetMessage(), "example.echo")
}

// "Progress reported after running reaches commands.get and better-compute
// commands run --wait (throttled, at most about one write per second per
// command)": example.echo reports ten steps over its sleepMs; commands.get
// shows a step while it runs (before, a step after running was dropped:
// the guarded transition to running changed nothing).
func TestE2E_ProgressAfterRunningReachesCommandsGet(t *testing.T) {
	if _, err := exec.LookPath("jq"); err != nil {
		t.Skip("jq is not installed")
	}
	c, kindsDir := exampleCluster(t)
	n := c.join()
	out, _, code := n.bcd("kinds", "--json")
	require.Equal(t, 0, code)
	var ms []map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &ms))
	var keep []map[string]any
	for _, m := range ms {
		if m["kind"] == "example.echo" {
			delete(m, "digest")
			keep = append(keep, m)
		}
	}
	doc, err := json.Marshal(keep)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(kindsDir, "acme.json"), doc, 0o600))
	c.restartControlPlane()
	n.start()

	cmd := c.run("example.echo", map[string]any{"message": "slow", "sleepMs": 4000})
	var seen *apiv1.Command
	testutil.WaitFor(t, 30*time.Second, "a progress step in commands.get while it runs", func() bool {
		got := c.get(cmd.GetId())
		if got.GetState() == "running" && got.GetProgress() != nil && strings.Contains(got.GetProgress().String(), "step") {
			seen = got
			return true
		}
		return false
	})
	require.Contains(t, seen.GetProgress().String(), "of 10")
	c.waitState(cmd.GetId(), "succeeded")
}
