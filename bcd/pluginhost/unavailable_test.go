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
)

// "A kind whose plugin is unavailable on the node fails or waits bounded by
// the command's not_after, never the kind's whole timeout": the plugin dies
// and every restart fails (its file now exits before the handshake); a
// command whose not_after is half a second away fails plugin-unavailable
// then, not after test.noop's minute (before, it waited until its deadline).
func TestHost_PluginDown_WaitsOnlyUntilNotAfter(t *testing.T) {
	f := newFixture(t)
	f.cfg.RestartBackoffMin, f.cfg.RestartBackoffMax = 50*time.Millisecond, 100*time.Millisecond
	p := install(t, f.dir, testplugins.KindTest, "bc-kind-test")
	h := mustStart(t, f, nil)
	pidFile := filepath.Join(t.TempDir(), "pid")
	_, err := execute(t, h, "test.sleep", fmt.Sprintf(`{"steps":0,"pidFile":%q}`, pidFile))
	require.NoError(t, err)
	broken := filepath.Join(f.dir, ".broken")
	require.NoError(t, os.WriteFile(broken, []byte("#!/bin/sh\nexit 3\n"), 0o755))
	require.NoError(t, os.Rename(broken, p))
	require.NoError(t, syscall.Kill(readPids(t, pidFile)[0], syscall.SIGKILL))
	testutil.WaitFor(t, 20*time.Second, "a failed restart", func() bool { return strings.Contains(f.logs.String(), "plugin restart failed") })

	start := time.Now()
	res, err := h.Execute(context.Background(), kind.Command{ID: "cmd_down", Kind: "test.noop", Payload: json.RawMessage(`{}`), NotAfter: start.Add(500 * time.Millisecond)}, nil)
	took := time.Since(start)
	require.ErrorIs(t, err, pluginhost.ErrPluginUnavailable)
	require.Equal(t, kind.StatusFailed, res.Status)
	require.Equal(t, kind.ReasonPluginUnavailable, res.Reason)
	require.Contains(t, res.Message, "not_after")
	require.Contains(t, res.Message, "last restart")
	require.GreaterOrEqual(t, took, 450*time.Millisecond, "it waited for the plugin until not_after")
	require.Less(t, took, 15*time.Second, "not the kind's whole timeout (1m)")

	// Past not_after nothing is waited for at all.
	start = time.Now()
	res, err = h.Execute(context.Background(), kind.Command{ID: "cmd_late", Kind: "test.noop", Payload: json.RawMessage(`{}`), NotAfter: start.Add(-time.Second)}, nil)
	require.ErrorIs(t, err, pluginhost.ErrPluginUnavailable)
	require.Equal(t, kind.ReasonPluginUnavailable, res.Reason)
	require.Less(t, time.Since(start), 2*time.Second)
}

// A plugin crashed and refused by its pin fails its commands at once, with
// the refusal's reason, whatever their not_after.
func TestHost_PluginRefusedByItsPin_FailsAtOnce(t *testing.T) {
	f := newFixture(t)
	p := install(t, f.dir, testplugins.KindTest, "bc-kind-test")
	b, err := os.ReadFile(p)
	require.NoError(t, err)
	f.cfg.SHA256 = map[string]string{"bc-kind-test": sha256Hex(b)}
	h := mustStart(t, f, nil)
	pidFile := filepath.Join(t.TempDir(), "pid")
	_, err = execute(t, h, "test.sleep", fmt.Sprintf(`{"steps":0,"pidFile":%q}`, pidFile))
	require.NoError(t, err)
	other := install(t, t.TempDir(), examplePkg, "swap")
	require.NoError(t, os.Rename(other, p))
	require.NoError(t, syscall.Kill(readPids(t, pidFile)[0], syscall.SIGKILL))
	testutil.WaitFor(t, 20*time.Second, "a refused restart", func() bool {
		return strings.Contains(f.logs.String(), "plugin restart failed") && strings.Contains(f.logs.String(), "SHA-256")
	})
	start := time.Now()
	res, err := h.Execute(context.Background(), kind.Command{ID: "cmd_pinned", Kind: "test.noop", Payload: json.RawMessage(`{}`), NotAfter: start.Add(time.Hour)}, nil)
	require.ErrorIs(t, err, pluginhost.ErrPluginUnavailable)
	require.Equal(t, kind.ReasonPluginUnavailable, res.Reason)
	require.Contains(t, res.Message, "SHA-256")
	require.Less(t, time.Since(start), 5*time.Second, "a refused plugin is not waited for")
}

func sha256Hex(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}
