package e2e

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

	"github.com/better-compute/commands/bcd/pluginhost"
	"github.com/better-compute/commands/controlplane/server"
	"github.com/better-compute/commands/internal/testplugins"
	"github.com/better-compute/commands/internal/testutil"
	apiv1 "github.com/better-compute/commands/proto/bc/api/v1"
	"github.com/better-compute/commands/sdk/kind"
)

const kindVersioned = "versioned.hold"

// versionedManifest is the manifest the versioned plugin built at version
// serves, read the way bcd reads it.
func versionedManifest(t *testing.T, version string) kind.Manifest {
	t.Helper()
	dir := t.TempDir()
	installPlugin(t, testutil.BuildVersion(t, testplugins.Versioned, version), filepath.Join(dir, "bc-kind-versioned"))
	host := pluginhost.New(hclog.NewNullLogger(), pluginhost.Config{Dir: dir}, nil)
	require.NoError(t, host.Start(context.Background()))
	defer func() { require.NoError(t, host.Close()) }()
	m, ok := host.Manifest(kindVersioned)
	require.True(t, ok)
	return m
}

// installPlugin copies src to dst 0755 through a rename, as a package
// upgrade does: the running binary is never written.
func installPlugin(t *testing.T, src, dst string) {
	t.Helper()
	b, err := os.ReadFile(src)
	require.NoError(t, err)
	tmp := filepath.Join(filepath.Dir(dst), "."+filepath.Base(dst)+".new")
	require.NoError(t, os.WriteFile(tmp, b, 0o755))
	require.NoError(t, os.Chmod(tmp, 0o755))
	require.NoError(t, os.Rename(tmp, dst))
}

// "Kinds from outside", upgraded end to end: the control plane registers v1
// and v2 of a kind in its kindsDir, the node runs v1; a long command starts
// on v1, the node's plugin is upgraded to v2 and `bcd reload` makes the
// running bcd take it. The long command finishes on v1, the next command
// runs on v2 (the node's new Hello carries v2's digest), and no command is
// lost, failed or expired by the upgrade.
func TestE2E_UpgradeAKindUnderARunningNodeLosesNoCommand(t *testing.T) {
	c := newCluster(t, func(cfg *server.Config) { cfg.Allowlist = append(cfg.Allowlist, kindVersioned) })
	v1, v2 := versionedManifest(t, "1.0.0"), versionedManifest(t, "2.0.0")
	require.NotEqual(t, v1.Digest(), v2.Digest())
	doc, err := json.Marshal([]kind.Manifest{v1, v2})
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(c.cfg.KindsDir, "versioned.json"), doc, 0o600))
	c.restartControlPlane()
	installPlugin(t, testutil.BuildVersion(t, testplugins.Versioned, "1.0.0"), filepath.Join(c.plugins, "bc-kind-versioned"))
	n := c.join()
	n.start()

	files := t.TempDir()
	long := map[string]any{"startedFile": filepath.Join(files, "long-started"), "releaseFile": filepath.Join(files, "long-release")}
	cmdLong := c.run(kindVersioned, long)
	testutil.WaitFor(t, 60*time.Second, "the long command to start on v1", func() bool {
		_, err := os.Stat(filepath.Join(files, "long-started"))
		return err == nil
	})
	c.waitState(cmdLong.GetId(), "running")

	installPlugin(t, testutil.BuildVersion(t, testplugins.Versioned, "2.0.0"), filepath.Join(c.plugins, "bc-kind-versioned"))
	before := n.sessions()
	out, errs, code := n.bcd("reload")
	require.Zero(t, code, "bcd reload: %s%s", out, errs)
	require.Contains(t, out, "started bc-kind-versioned")
	n.waitSession(before)

	next := map[string]any{"startedFile": filepath.Join(files, "next-started"), "releaseFile": filepath.Join(files, "next-release")}
	require.NoError(t, os.WriteFile(filepath.Join(files, "next-release"), nil, 0o600))
	cmdNext := c.run(kindVersioned, next)
	got := c.waitState(cmdNext.GetId(), "succeeded")
	require.Contains(t, got.GetResult().String(), "2.0.0", "the next command ran on v2")

	got = c.get(cmdLong.GetId())
	require.Equal(t, "running", got.GetState(), "the long command runs on across the upgrade")
	require.NoError(t, os.WriteFile(filepath.Join(files, "long-release"), nil, 0o600))
	got = c.waitState(cmdLong.GetId(), "succeeded")
	require.Contains(t, got.GetResult().String(), "1.0.0", "the long command finished on v1")

	list, err := c.api.List(c.ctx(), &apiv1.ListCommandsRequest{TenantId: "tenant_a", NodeId: "node_a1"})
	require.NoError(t, err)
	require.Len(t, list.GetItems(), 2)
	for _, cmd := range list.GetItems() {
		require.Equal(t, "succeeded", cmd.GetState(), "%s: %s %s", cmd.GetId(), cmd.GetReason(), cmd.GetMessage())
		require.Equal(t, 1, c.settledCount(cmd.GetId()))
	}
	require.False(t, strings.Contains(n.logs.String(), "plugin-crashed"))
}
