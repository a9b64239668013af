package pluginhost_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/bcd/pluginhost"
	"github.com/better-compute/commands/internal/testplugins"
	"github.com/better-compute/commands/internal/testutil"
	"github.com/better-compute/commands/sdk/kind"
	"github.com/better-compute/commands/sdk/wire"
)

func TestHost_Start_RefusesAKindClaimedByTwoBinaries_NamingBoth(t *testing.T) {
	f := newFixture(t)
	install(t, f.dir, testplugins.KindTest, "bc-kind-a")
	install(t, f.dir, testplugins.KindTest, "bc-kind-b")
	h, err := f.start(t, nil)
	require.ErrorIs(t, err, pluginhost.ErrRefused)
	require.Contains(t, err.Error(), "bc-kind-a")
	require.Contains(t, err.Error(), "bc-kind-b")
	require.Contains(t, err.Error(), "claimed by both")
	// The first in name order keeps its kinds and serves them.
	res, err := execute(t, h, "test.noop", `{}`)
	require.NoError(t, err)
	require.Equal(t, kind.StatusSucceeded, res.Status)
}

func TestHost_Start_RefusesASymlinkThatLeavesTheDirectory(t *testing.T) {
	f := newFixture(t)
	outside := t.TempDir()
	target := install(t, outside, examplePkg, "bc-kind-example")
	require.NoError(t, os.Symlink(target, filepath.Join(f.dir, "bc-kind-example")))
	install(t, f.dir, testplugins.KindTest, "bc-kind-test")
	h, err := f.start(t, nil)
	require.ErrorIs(t, err, pluginhost.ErrRefused)
	require.Contains(t, err.Error(), "leaves the plugin directory")
	_, ok := h.Manifest("example.echo")
	require.False(t, ok, "the escaping binary never ran")
	_, ok = h.Manifest("test.noop")
	require.True(t, ok, "the other plugins still load")
}

func TestHost_Start_FollowsASymlinkInsideTheDirectory(t *testing.T) {
	f := newFixture(t)
	require.NoError(t, os.Mkdir(filepath.Join(f.dir, "versions"), 0o755))
	install(t, filepath.Join(f.dir, "versions"), examplePkg, "bc-kind-example-1.0.0")
	require.NoError(t, os.Symlink(filepath.Join("versions", "bc-kind-example-1.0.0"), filepath.Join(f.dir, "bc-kind-example")))
	h := mustStart(t, f, nil)
	_, ok := h.Manifest("example.echo")
	require.True(t, ok)
}

func TestHost_Start_RefusesAFileWritableByOthers(t *testing.T) {
	f := newFixture(t)
	p := install(t, f.dir, examplePkg, "bc-kind-example")
	require.NoError(t, os.Chmod(p, 0o777))
	_, err := f.start(t, nil)
	require.ErrorIs(t, err, pluginhost.ErrRefused)
	require.Contains(t, err.Error(), "writable by group or others")
}

func TestHost_Start_SHA256Pinning(t *testing.T) {
	digest := func(t *testing.T, path string) string {
		b, err := os.ReadFile(path)
		require.NoError(t, err)
		sum := sha256.Sum256(b)
		return hex.EncodeToString(sum[:])
	}
	t.Run("a pin that matches loads", func(t *testing.T) {
		f := newFixture(t)
		p := install(t, f.dir, examplePkg, "bc-kind-example")
		f.cfg.SHA256 = map[string]string{"bc-kind-example": digest(t, p)}
		h := mustStart(t, f, nil)
		_, ok := h.Manifest("example.echo")
		require.True(t, ok)
	})
	t.Run("a pin that differs is refused", func(t *testing.T) {
		f := newFixture(t)
		install(t, f.dir, examplePkg, "bc-kind-example")
		f.cfg.SHA256 = map[string]string{"bc-kind-example": strings.Repeat("ab", 32)}
		h, err := f.start(t, nil)
		require.ErrorIs(t, err, pluginhost.ErrRefused)
		require.ErrorIs(t, err, wire.ErrChecksum)
		require.Contains(t, err.Error(), "bc-kind-example")
		require.Empty(t, h.Manifests())
	})
	t.Run("a pin that is not hex is refused", func(t *testing.T) {
		f := newFixture(t)
		install(t, f.dir, examplePkg, "bc-kind-example")
		f.cfg.SHA256 = map[string]string{"bc-kind-example": "sha256:nothex"}
		_, err := f.start(t, nil)
		require.ErrorIs(t, err, pluginhost.ErrRefused)
		require.Contains(t, err.Error(), "64 hex digits")
	})
}

func TestHost_Start_RefusesAnInvalidManifest(t *testing.T) {
	f := newFixture(t)
	install(t, f.dir, testplugins.BadManifest, "bc-kind-bad")
	h, err := f.start(t, nil)
	require.ErrorIs(t, err, pluginhost.ErrRefused)
	require.Contains(t, err.Error(), "bc-kind-bad")
	require.Contains(t, err.Error(), "lane")
	require.Empty(t, h.Manifests())
}

// A pin holds at every restart: a binary swapped on disk is refused, and
// commands for its kinds fail plugin-unavailable instead of running it.
func TestHost_Restart_RefusesASwappedPinnedBinary(t *testing.T) {
	f := newFixture(t)
	p := install(t, f.dir, testplugins.KindTest, "bc-kind-test")
	b, err := os.ReadFile(p)
	require.NoError(t, err)
	sum := sha256.Sum256(b)
	f.cfg.SHA256 = map[string]string{"bc-kind-test": hex.EncodeToString(sum[:])}
	h := mustStart(t, f, nil)

	pidFile := filepath.Join(t.TempDir(), "pid")
	_, err = execute(t, h, "test.sleep", fmt.Sprintf(`{"steps":0,"pidFile":%q}`, pidFile))
	require.NoError(t, err)
	// Swap the file (a running binary cannot be written, but renamed over).
	other := install(t, t.TempDir(), examplePkg, "swap")
	require.NoError(t, os.Rename(other, p))
	require.NoError(t, syscall.Kill(readPids(t, pidFile)[0], syscall.SIGKILL))
	testutil.WaitFor(t, 20*time.Second, "a refused restart", func() bool {
		return strings.Contains(f.logs.String(), "plugin restart failed") && strings.Contains(f.logs.String(), "SHA-256")
	})

	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	res, err := h.Execute(ctx, kind.Command{ID: "cmd_after_swap", Kind: "test.noop", Payload: json.RawMessage(`{}`)}, nil)
	require.ErrorIs(t, err, pluginhost.ErrPluginUnavailable)
	require.Equal(t, kind.StatusFailed, res.Status)
	require.Equal(t, "plugin-unavailable", res.Reason)
}
