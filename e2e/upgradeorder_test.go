package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/controlplane/server"
	"github.com/better-compute/commands/controlplane/server/servertest"
	"github.com/better-compute/commands/internal/testplugins"
	"github.com/better-compute/commands/internal/testutil"
	apiv1 "github.com/better-compute/commands/proto/bc/api/v1"
	"github.com/better-compute/commands/sdk/kind"
)

// Issue 33: "Upgrades in either order: registering 1.1.0 before or after
// the nodes get the new binary both work with nothing expired: during the
// overlap the control plane accepts both digests it knows for the version
// range the manifest declares". The versioned plugin declares
// compatibleVersions "^1" (its major version). Node first: the registry
// holds 1.0.0 alone and the node takes 1.1.0, whose digest the registry has
// never seen: its commands run, under 1.0.0's range. Registry first: 1.2.0
// is registered (1.0.0's file removed) while the node still runs 1.1.0:
// they run, under 1.2.0's range; then the node takes 1.2.0 (its digest
// registered). Every command succeeds on the version the node runs; none
// expires, none waits.
func TestE2E_UpgradeAKindNodeFirstAndRegistryFirstExpiresNothing(t *testing.T) {
	c := newCluster(t, func(cfg *server.Config) { cfg.Allowlist = append(cfg.Allowlist, kindVersioned) })
	register := func(versions ...string) {
		var ms []kind.Manifest
		for _, v := range versions {
			m := versionedManifest(t, v)
			require.Equal(t, "^1", m.CompatibleVersions)
			ms = append(ms, m)
		}
		doc, err := json.Marshal(ms)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(c.cfg.KindsDir, "versioned.json"), doc, 0o600))
		c.restartControlPlane()
	}
	n := c.join()
	upgradeNode := func(v string) {
		installPlugin(t, testutil.BuildVersion(t, testplugins.Versioned, v), filepath.Join(c.plugins, "bc-kind-versioned"))
		if n.proc == nil {
			n.start()
			return
		}
		before := n.sessions()
		out, errs, code := n.bcd("reload")
		require.Zero(t, code, "bcd reload: %s%s", out, errs)
		n.waitSession(before)
	}
	files := t.TempDir()
	release := filepath.Join(files, "release")
	require.NoError(t, os.WriteFile(release, nil, 0o600))
	runsOn := func(want, status string) {
		t.Helper()
		cmd := c.run(kindVersioned, map[string]any{"releaseFile": release})
		got := c.waitState(cmd.GetId(), "succeeded")
		require.Contains(t, got.GetResult().String(), want, "ran on the node's version")
		require.Empty(t, got.GetWaitingReason(), "it never waited")
		node, err := apiv1.NewNodesClient(c.conn).Get(c.ctx(), &apiv1.GetNodeRequest{TenantId: servertest.TenantA, NodeId: servertest.NodeA1})
		require.NoError(t, err)
		for _, k := range node.GetKinds() {
			if k.GetKind() == kindVersioned {
				require.Equal(t, status, k.GetStatus(), "nodes get says how the registry sees the node's %s", want)
				require.Equal(t, want, k.GetVersion())
			}
		}
	}

	register("1.0.0")
	upgradeNode("1.0.0")
	runsOn("1.0.0", "registered")

	// Node first: 1.1.0 reaches the node before the registry knows it.
	upgradeNode("1.1.0")
	runsOn("1.1.0", "compatible")

	// Registry first: 1.2.0 registered, 1.0.0's manifest gone, the node
	// still on 1.1.0; then the node takes 1.2.0.
	register("1.2.0")
	before := n.sessions()
	n.stop() // the restarted control plane ended its session; reconnect at once
	n.start()
	require.Greater(t, n.sessions(), before)
	runsOn("1.1.0", "compatible")
	upgradeNode("1.2.0")
	runsOn("1.2.0", "registered")

	list, err := c.api.List(c.ctx(), &apiv1.ListCommandsRequest{TenantId: servertest.TenantA, NodeId: servertest.NodeA1})
	require.NoError(t, err)
	require.Len(t, list.GetItems(), 4)
	for _, cmd := range list.GetItems() {
		require.Equal(t, "succeeded", cmd.GetState(), "%s: %s %s", cmd.GetId(), cmd.GetReason(), cmd.GetMessage())
	}
}
