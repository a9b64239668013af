package pluginhost_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
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

// installVersion copies the versioned plugin built at version into dir as
// name, through a rename, as a package upgrade does (the running binary is
// never written).
func installVersion(t testing.TB, dir, version, name string) {
	t.Helper()
	b, err := os.ReadFile(testutil.BuildVersion(t, testplugins.Versioned, version))
	require.NoError(t, err)
	tmp := filepath.Join(dir, "."+name+".new")
	require.NoError(t, os.WriteFile(tmp, b, 0o755))
	require.NoError(t, os.Chmod(tmp, 0o755))
	require.NoError(t, os.Rename(tmp, filepath.Join(dir, name)))
}

type hold struct{ started, release string }

func newHoldFiles(t testing.TB) hold {
	d := t.TempDir()
	return hold{started: filepath.Join(d, "started"), release: filepath.Join(d, "release")}
}

func (h hold) payload() json.RawMessage {
	b, _ := json.Marshal(map[string]string{"startedFile": h.started, "releaseFile": h.release})
	return b
}

func (h hold) pid(t testing.TB) int {
	var pid int
	testutil.WaitFor(t, 30*time.Second, "the hold to start", func() bool {
		b, err := os.ReadFile(h.started)
		if err != nil {
			return false
		}
		pid, err = strconv.Atoi(string(b))
		return err == nil
	})
	return pid
}

type ranOn struct {
	Version string `json:"version"`
	Pid     int    `json:"pid"`
}

func runOf(t testing.TB, res kind.Result) ranOn {
	t.Helper()
	var r ranOn
	require.NoError(t, json.Unmarshal(res.Data, &r), string(res.Data))
	return r
}

type outcome struct {
	res kind.Result
	err error
}

func executeAsync(h *pluginhost.Host, id string, payload json.RawMessage) <-chan outcome {
	done := make(chan outcome, 1)
	go func() {
		res, err := h.Execute(context.Background(), kind.Command{ID: id, Kind: "versioned.hold", Payload: payload}, nil)
		done <- outcome{res, err}
	}()
	return done
}

func wait(t testing.TB, ch <-chan outcome) outcome {
	t.Helper()
	select {
	case o := <-ch:
		return o
	case <-time.After(60 * time.Second):
		t.Fatal("Execute did not return")
		return outcome{}
	}
}

// "bcd reloads its plugin directory and lets commands already running on the
// old plugin process finish; new commands go to the new plugin": a long
// command on v1 keeps running across the reload to v2 and finishes on v1;
// the next command runs on v2; the old process stops once its command is
// done.
func TestHost_Reload_ALongCommandFinishesOnV1_TheNextRunsOnV2(t *testing.T) {
	f := newFixture(t)
	installVersion(t, f.dir, "1.0.0", "bc-kind-versioned")
	h := mustStart(t, f, nil)
	m, _ := h.Manifest("versioned.hold")
	require.Equal(t, "1.0.0", m.Version)

	long := newHoldFiles(t)
	longDone := executeAsync(h, "cmd_long", long.payload())
	v1pid := long.pid(t)

	installVersion(t, f.dir, "2.0.0", "bc-kind-versioned")
	rep, err := h.Reload(context.Background(), nil)
	require.NoError(t, err)
	require.Equal(t, []string{"bc-kind-versioned"}, rep.Started)
	require.Equal(t, []string{"bc-kind-versioned"}, rep.Retired)
	m, _ = h.Manifest("versioned.hold")
	require.Equal(t, "2.0.0", m.Version, "the reloaded manifest is what bcd reports")

	next := newHoldFiles(t)
	require.NoError(t, os.WriteFile(next.release, nil, 0o600))
	o := wait(t, executeAsync(h, "cmd_next", next.payload()))
	require.NoError(t, o.err)
	require.Equal(t, kind.StatusSucceeded, o.res.Status, o.res.Message)
	require.Equal(t, "2.0.0", runOf(t, o.res).Version, "the next command runs on v2")
	require.NotEqual(t, v1pid, runOf(t, o.res).Pid)

	select {
	case o := <-longDone:
		t.Fatalf("the long command ended at the reload: %+v", o)
	default:
	}
	require.False(t, gone(v1pid), "the old process runs while its command does")
	require.NoError(t, os.WriteFile(long.release, nil, 0o600))
	o = wait(t, longDone)
	require.NoError(t, o.err)
	require.Equal(t, kind.StatusSucceeded, o.res.Status, o.res.Message)
	require.Equal(t, ranOn{Version: "1.0.0", Pid: v1pid}, runOf(t, o.res), "finished on v1")
	testutil.WaitFor(t, 20*time.Second, "the retired v1 process to stop", func() bool { return gone(v1pid) })
	require.Len(t, h.Plugins(), 1)
}

// A reload of an unchanged directory keeps every process; a new file is
// started; a removed one is retired and its kinds are gone.
func TestHost_Reload_KeepsUnchangedPlugins_StartsNewOnes_RetiresRemovedOnes(t *testing.T) {
	f := newFixture(t)
	installVersion(t, f.dir, "1.0.0", "bc-kind-versioned")
	h := mustStart(t, f, nil)
	first := newHoldFiles(t)
	require.NoError(t, os.WriteFile(first.release, nil, 0o600))
	o := wait(t, executeAsync(h, "cmd_a", first.payload()))
	pid := runOf(t, o.res).Pid

	install(t, f.dir, examplePkg, "bc-kind-example")
	rep, err := h.Reload(context.Background(), nil)
	require.NoError(t, err)
	require.Equal(t, []string{"bc-kind-versioned"}, rep.Kept)
	require.Equal(t, []string{"bc-kind-example"}, rep.Started)
	require.Empty(t, rep.Retired)
	second := newHoldFiles(t)
	require.NoError(t, os.WriteFile(second.release, nil, 0o600))
	o = wait(t, executeAsync(h, "cmd_b", second.payload()))
	require.Equal(t, pid, runOf(t, o.res).Pid, "the unchanged plugin kept its process")

	require.NoError(t, os.Remove(filepath.Join(f.dir, "bc-kind-versioned")))
	rep, err = h.Reload(context.Background(), nil)
	require.NoError(t, err)
	require.Equal(t, []string{"bc-kind-versioned"}, rep.Retired)
	_, ok := h.Manifest("versioned.hold")
	require.False(t, ok)
	res, err := execute(t, h, "versioned.hold", `{}`)
	require.ErrorIs(t, err, pluginhost.ErrUnknownKind)
	require.Equal(t, kind.ReasonUnknownKind, res.Reason)
	testutil.WaitFor(t, 20*time.Second, "the removed plugin's process to stop", func() bool { return gone(pid) })
}

// A reload whose new file is refused leaves the running version serving: a
// bad upgrade takes nothing down, and says why.
func TestHost_Reload_ARefusedNewVersionKeepsTheOldOneServing(t *testing.T) {
	f := newFixture(t)
	installVersion(t, f.dir, "1.0.0", "bc-kind-versioned")
	h := mustStart(t, f, nil)
	installVersion(t, f.dir, "2.0.0", "bc-kind-versioned")
	require.NoError(t, os.Chmod(filepath.Join(f.dir, "bc-kind-versioned"), 0o777))
	rep, err := h.Reload(context.Background(), nil)
	require.ErrorIs(t, err, pluginhost.ErrRefused)
	require.Contains(t, err.Error(), "writable by group or others")
	require.Equal(t, []string{"bc-kind-versioned"}, rep.Kept)
	require.Len(t, h.Refused(), 1)
	m, ok := h.Manifest("versioned.hold")
	require.True(t, ok)
	require.Equal(t, "1.0.0", m.Version)
	hf := newHoldFiles(t)
	require.NoError(t, os.WriteFile(hf.release, nil, 0o600))
	o := wait(t, executeAsync(h, "cmd_still_v1", hf.payload()))
	require.Equal(t, "1.0.0", runOf(t, o.res).Version)
}

// A retired plugin whose old process dies is not restarted (its file is
// the new version now): its running command fails plugin-crashed.
func TestHost_Reload_ARetiredPluginThatDiesIsNotRestarted(t *testing.T) {
	f := newFixture(t)
	installVersion(t, f.dir, "1.0.0", "bc-kind-versioned")
	h := mustStart(t, f, nil)
	long := newHoldFiles(t)
	longDone := executeAsync(h, "cmd_long", long.payload())
	v1pid := long.pid(t)
	installVersion(t, f.dir, "2.0.0", "bc-kind-versioned")
	_, err := h.Reload(context.Background(), nil)
	require.NoError(t, err)
	require.NoError(t, syscall.Kill(v1pid, syscall.SIGKILL))
	o := wait(t, longDone)
	require.ErrorIs(t, o.err, pluginhost.ErrPluginCrashed)
	require.Equal(t, kind.ReasonPluginCrashed, o.res.Reason)
	testutil.WaitFor(t, 20*time.Second, "the supervisor to let the retired plugin go", func() bool {
		return strings.Contains(f.logs.String(), "retired plugin exited; not restarting it")
	})
	require.Len(t, h.Plugins(), 1)
	require.NotContains(t, f.logs.String(), "plugin restarted")
}
