package daemon

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/bcd/journal"
	"github.com/better-compute/commands/bcd/pluginhost"
	"github.com/better-compute/commands/internal/testplugins"
	"github.com/better-compute/commands/internal/testutil"
	"github.com/better-compute/commands/sdk/kind"
)

// startOwn opens a node whose plugin directory is its own, so a test may
// change what is in it; binaries maps file names to built binaries.
func startOwn(t *testing.T, binaries map[string]string) (*node, string) {
	t.Helper()
	n, dir, _ := startOwnEvents(t, binaries)
	return n, dir
}

// startOwnEvents is startOwn that also counts the plugin host's crash
// events, so a test can wait until the host noticed a plugin died.
func startOwnEvents(t *testing.T, binaries map[string]string) (*node, string, *atomic.Int32) {
	t.Helper()
	dir := t.TempDir()
	for name, src := range binaries {
		copyPlugin(t, src, filepath.Join(dir, name))
	}
	stateDir := t.TempDir()
	lg := logger(t)
	j, err := journal.Open(lg, stateDir, journal.Options{})
	require.NoError(t, err)
	st, err := NewState(stateDir, j)
	require.NoError(t, err)
	crashes := &atomic.Int32{}
	host := pluginhost.New(lg, pluginhost.Config{Dir: dir, RestartBackoffMin: 20 * time.Millisecond, RestartBackoffMax: 100 * time.Millisecond,
		OnEvent: func(_ string, e pluginhost.Event) {
			if e == pluginhost.EventCrash {
				crashes.Add(1)
			}
		}}, st)
	require.NoError(t, host.Start(context.Background()))
	d, err := New(lg, Config{NodeID: nodeID, Role: "node", BootID: "boot-1"}, j, st, host)
	require.NoError(t, err)
	n := &node{t: t, dir: stateDir, j: j, state: st, host: host, d: d}
	t.Cleanup(n.stop)
	return n, dir, crashes
}

// copyPlugin installs src at dst through a rename, as a package upgrade
// does: the running binary is never written.
func copyPlugin(t *testing.T, src, dst string) {
	t.Helper()
	b, err := os.ReadFile(src)
	require.NoError(t, err)
	tmp := filepath.Join(filepath.Dir(dst), "."+filepath.Base(dst)+".new")
	require.NoError(t, os.WriteFile(tmp, b, 0o755))
	require.NoError(t, os.Chmod(tmp, 0o755))
	require.NoError(t, os.Rename(tmp, dst))
}

func startedPid(t *testing.T, h holdFiles) int {
	t.Helper()
	var pid int
	testutil.WaitFor(t, 30*time.Second, "the kind to start", func() bool {
		b, err := os.ReadFile(h.StartedFile)
		if err != nil {
			return false
		}
		pid, err = strconv.Atoi(string(b))
		return err == nil
	})
	return pid
}

// The rule for a command whose plugin crashes mid-run: it fails with
// reason plugin-crashed, retry-safe or not, and bcd never runs it again on
// its own (the crash may be the command's doing; its owner decides, and a
// retry-safe kind tells it that queueing it again is harmless).
func TestPluginCrash_ARetrySafeCommandFailsPluginCrashedAndIsNotRerun(t *testing.T) {
	n, _ := startOwn(t, map[string]string{"bcdcore": testutil.BuildBinary(t, testplugins.BCDCore)})
	h := newHold(t, true)
	m, ok := n.host.Manifest("bcdcore.hold")
	require.True(t, ok)
	require.True(t, m.Flags.RetrySafe)
	ch, err := n.d.Submit(context.Background(), cmd("cmd_crash", "bcdcore.hold", h))
	require.NoError(t, err)
	require.NoError(t, syscall.Kill(startedPid(t, h), syscall.SIGKILL))
	out := last(t, collect(t, ch))
	require.Equal(t, journal.StateFailed, out.State)
	require.Equal(t, kind.ReasonPluginCrashed, out.Reason)

	// The restarted plugin serves the next command; the crashed one did not
	// run again, not then and not after a restart of bcd.
	h2 := newHold(t, true)
	h2.release(t)
	out2 := last(t, collect(t, mustSubmit(t, n, cmd("cmd_after", "bcdcore.hold", h2))))
	require.Equal(t, journal.StateSucceeded, out2.State)
	require.Equal(t, 1, h.runs(t), "not rerun")
	rec, _, err := n.j.Get("cmd_crash")
	require.NoError(t, err)
	require.Equal(t, journal.StateFailed, rec.State)
	require.Equal(t, kind.ReasonPluginCrashed, rec.Reason)
	dup := last(t, collect(t, mustSubmit(t, n, cmd("cmd_crash", "bcdcore.hold", h))))
	require.True(t, dup.Duplicate)
	require.Equal(t, kind.ReasonPluginCrashed, dup.Reason)
	require.Equal(t, 1, h.runs(t), "a duplicate delivery gets the stored answer")
}

// A kind whose plugin is down and does not come back fails
// plugin-unavailable at the command's not_after, never after the kind's
// whole timeout (bcdcore.hold: 2 minutes).
func TestPluginUnavailable_FailsAtNotAfter(t *testing.T) {
	n, dir, crashes := startOwnEvents(t, map[string]string{"bcdcore": testutil.BuildBinary(t, testplugins.BCDCore)})
	h := newHold(t, false)
	out := last(t, collect(t, mustSubmit(t, n, cmd("cmd_up", "bcdcore.hold", h))))
	require.Equal(t, journal.StateSucceeded, out.State)
	pid := startedPid(t, h)
	broken := filepath.Join(dir, ".broken")
	require.NoError(t, os.WriteFile(broken, []byte("#!/bin/sh\nexit 3\n"), 0o755))
	require.NoError(t, os.Rename(broken, filepath.Join(dir, "bcdcore")))
	require.NoError(t, syscall.Kill(pid, syscall.SIGKILL))
	// Submitted before the host noticed the death, the command would go to
	// the dying process and fail plugin-crashed instead.
	testutil.WaitFor(t, 10*time.Second, "the host to notice the plugin died", func() bool { return crashes.Load() > 0 })

	c := cmd("cmd_down", "bcdcore.hold", newHold(t, false))
	c.NotAfter = time.Now().Add(time.Second)
	start := time.Now()
	out = last(t, collect(t, mustSubmit(t, n, c)))
	require.Equal(t, journal.StateFailed, out.State)
	require.Equal(t, kind.ReasonPluginUnavailable, out.Reason)
	require.Less(t, time.Since(start), 20*time.Second, "bounded by not_after, not the kind's 2m timeout")
}

// bcd reloads its plugin directory while a command runs: the command
// finishes on the old version, the next one is accepted against the new
// manifest and runs on the new version, and both are journaled succeeded.
func TestReload_ALongCommandFinishesOnV1_TheNextRunsOnV2(t *testing.T) {
	n, dir := startOwn(t, map[string]string{"bc-kind-versioned": testutil.BuildVersion(t, testplugins.Versioned, "1.0.0")})
	type vh struct {
		StartedFile string `json:"startedFile"`
		ReleaseFile string `json:"releaseFile"`
	}
	d := t.TempDir()
	long := vh{StartedFile: filepath.Join(d, "long-started"), ReleaseFile: filepath.Join(d, "long-release")}
	longCh := mustSubmit(t, n, cmd("cmd_v1", "versioned.hold", long))
	testutil.WaitFor(t, 30*time.Second, "the long command to start", func() bool {
		_, err := os.Stat(long.StartedFile)
		return err == nil
	})

	copyPlugin(t, testutil.BuildVersion(t, testplugins.Versioned, "2.0.0"), filepath.Join(dir, "bc-kind-versioned"))
	rep, err := n.host.Reload(context.Background(), nil)
	require.NoError(t, err)
	require.Equal(t, []string{"bc-kind-versioned"}, rep.Started)
	m, _ := n.host.Manifest("versioned.hold")
	require.Equal(t, "2.0.0", m.Version)

	next := vh{StartedFile: filepath.Join(d, "next-started"), ReleaseFile: filepath.Join(d, "next-release")}
	require.NoError(t, os.WriteFile(next.ReleaseFile, nil, 0o600))
	out := last(t, collect(t, mustSubmit(t, n, cmd("cmd_v2", "versioned.hold", next))))
	require.Equal(t, journal.StateSucceeded, out.State, out.Message)
	require.Equal(t, "2.0.0", versionOf(t, out.Result))

	require.NoError(t, os.WriteFile(long.ReleaseFile, nil, 0o600))
	out = last(t, collect(t, longCh))
	require.Equal(t, journal.StateSucceeded, out.State, out.Message)
	require.Equal(t, "1.0.0", versionOf(t, out.Result), "finished on the old version")
}

func versionOf(t *testing.T, result json.RawMessage) string {
	t.Helper()
	var r struct{ Version string }
	require.NoError(t, json.Unmarshal(result, &r), string(result))
	return r.Version
}
