package main

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/internal/testplugins"
	"github.com/better-compute/commands/internal/testutil"
)

// installAs copies src into the plugin directory as name through a rename,
// as a package upgrade does.
func (e *env) installAs(src, name string) {
	e.t.Helper()
	b, err := os.ReadFile(src)
	require.NoError(e.t, err)
	tmp := filepath.Join(e.plugins, "."+name+".new")
	require.NoError(e.t, os.WriteFile(tmp, b, 0o755))
	require.NoError(e.t, os.Chmod(tmp, 0o755))
	require.NoError(e.t, os.Rename(tmp, filepath.Join(e.plugins, name)))
}

// "bcd kinds exits non-zero when any plugin was refused (and says which and
// why)"; what did load is still listed.
func TestKinds_ARefusedPluginMakesItExitNonZeroNamingItAndWhy(t *testing.T) {
	e := newEnv(t)
	e.installAs(testutil.BuildVersion(t, testplugins.Versioned, "1.0.0"), "bc-kind-versioned")
	require.NoError(t, os.Chmod(filepath.Join(e.plugins, "bc-kind-versioned"), 0o777))
	for _, args := range [][]string{{"kinds"}, {"kinds", "--json"}} {
		out, errs, code := e.bcd(args...)
		require.Equal(t, 1, code, "stderr: %s", errs)
		require.Contains(t, errs, "bcd kinds: refused plugin bc-kind-versioned: plugin refused: bc-kind-versioned: the file is writable by group or others (mode -rwxrwxrwx)")
		require.Contains(t, out, "example.echo", "what loaded is listed")
		require.NotContains(t, out, "versioned.hold")
	}
	require.NoError(t, os.Chmod(filepath.Join(e.plugins, "bc-kind-versioned"), 0o755))
	out, errs, code := e.bcd("kinds")
	require.Zero(t, code, errs)
	require.Contains(t, out, "versioned.hold")
}

// logLines collects the JSON log lines of a bcd run.
type logLines struct {
	mu    sync.Mutex
	lines []map[string]any
}

func (l *logLines) has(msg string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, line := range l.lines {
		if line["@message"] == msg {
			return true
		}
	}
	return false
}

// "bcd reload sends SIGHUP to the running daemon": bcd run reloads its
// plugin directory, bcd reload reports what changed and exits 0; the
// replaced plugin's old process stops and a new one serves; a reload that
// refuses a plugin exits 1 naming it, and the running version serves on.
func TestReload_UpgradesAPluginWhileBcdRuns(t *testing.T) {
	e := newEnv(t)
	e.installAs(testutil.BuildVersion(t, testplugins.Versioned, "1.0.0"), "bc-kind-versioned")
	_, errs, code := e.bcd("reload", "--timeout", "2s")
	require.Equal(t, 1, code)
	require.Contains(t, errs, "no running bcd")

	run := e.command("run", "--log-json")
	stderr, err := run.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, run.Start())
	defer func() { _ = run.Process.Kill(); _ = run.Wait() }()
	logs := &logLines{}
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			var line map[string]any
			if json.Unmarshal(sc.Bytes(), &line) == nil {
				logs.mu.Lock()
				logs.lines = append(logs.lines, line)
				logs.mu.Unlock()
			}
		}
	}()
	testutil.WaitFor(t, 60*time.Second, "bcd run to write its pid file", func() bool {
		_, err := os.Stat(filepath.Join(e.state, "bcd.pid"))
		return err == nil
	})
	v1 := pluginPids(t, filepath.Join(e.plugins, "bc-kind-versioned"))
	require.Len(t, v1, 1)

	e.installAs(testutil.BuildVersion(t, testplugins.Versioned, "2.0.0"), "bc-kind-versioned")
	out, errs, code := e.bcd("reload", "--json")
	require.Zero(t, code, errs)
	var st reloadStatus
	require.NoError(t, json.Unmarshal([]byte(out), &st), out)
	require.Equal(t, run.Process.Pid, st.Pid)
	require.Equal(t, []string{"bc-kind-versioned"}, st.Started)
	require.Equal(t, []string{"bc-kind-versioned"}, st.Retired)
	require.Contains(t, st.Kept, "internal_testplugins_bcdcore_plugin")
	require.Empty(t, st.Refused)
	require.Contains(t, st.Kinds, "versioned.hold")
	require.True(t, logs.has("plugins reloaded"))
	testutil.WaitFor(t, 20*time.Second, "v1's process to stop", func() bool { return !alive(v1[0]) })
	v2 := pluginPids(t, filepath.Join(e.plugins, "bc-kind-versioned"))
	require.Len(t, v2, 1)
	require.NotEqual(t, v1[0], v2[0])

	require.NoError(t, os.Chmod(filepath.Join(e.plugins, "sdk_example_cmd_bc-kind-example"), 0o777))
	out, errs, code = e.bcd("reload")
	require.Equal(t, 1, code, "a refused plugin fails the reload: %s", errs)
	require.Contains(t, out, "kept")
	require.Contains(t, errs, "refused plugin sdk_example_cmd_bc-kind-example")
	require.Contains(t, errs, "writable by group or others")

	require.NoError(t, run.Process.Signal(syscall.SIGTERM))
	require.NoError(t, run.Wait(), "bcd run stops cleanly after reloads")
	_, err = os.Stat(filepath.Join(e.state, "bcd.pid"))
	require.True(t, os.IsNotExist(err), "the pid file is removed at exit")
}

// pluginPids lists the processes running the plugin binary at path name.
func pluginPids(t *testing.T, name string) []int {
	t.Helper()
	var pids []int
	ents, err := os.ReadDir("/proc")
	require.NoError(t, err)
	for _, ent := range ents {
		pid := 0
		for _, c := range ent.Name() {
			if c < '0' || c > '9' {
				pid = -1
				break
			}
			pid = pid*10 + int(c-'0')
		}
		if pid <= 0 {
			continue
		}
		exe, err := os.Readlink(filepath.Join("/proc", ent.Name(), "exe"))
		// The full path: other tests run plugins of the same name at once.
		if err == nil && strings.TrimSuffix(exe, " (deleted)") == name && alive(pid) {
			pids = append(pids, pid)
		}
	}
	return pids
}
