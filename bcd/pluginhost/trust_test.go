package pluginhost_test

import (
	"context"
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

// otherUID is a uid that is neither root nor ours.
const otherUID = 54321

func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("chown to another user needs root")
	}
}

// refusedFor returns the refusal of plugin, failing when there is none.
func refusedFor(t *testing.T, h *pluginhost.Host, plugin string) string {
	t.Helper()
	for _, r := range h.Refused() {
		if r.Plugin == plugin {
			return r.Err.Error()
		}
	}
	t.Fatalf("%s was not refused; refused: %v", plugin, h.Refused())
	return ""
}

// "A plugin file owned by a user other than root or bcd's own user, or in a
// directory writable by group or others, or itself writable by group or
// others, is refused with a log line naming why": real files, chmod and
// chown; the trusted plugin beside them still loads.
func TestHost_Trust_RefusesWhatAnotherUserCouldChange(t *testing.T) {
	cases := []struct {
		name  string
		setup func(t *testing.T, f *fixture) string // returns the plugin name to refuse
		why   string
	}{
		{name: "a file owned by another user", why: fmt.Sprintf("owned by uid %d", otherUID), setup: func(t *testing.T, f *fixture) string {
			needRoot(t)
			p := install(t, f.dir, examplePkg, "bc-kind-other")
			require.NoError(t, os.Chown(p, otherUID, otherUID))
			return "bc-kind-other"
		}},
		{name: "a file writable by its group", why: "the file is writable by group or others (mode -rwxrwxr-x)", setup: func(t *testing.T, f *fixture) string {
			p := install(t, f.dir, examplePkg, "bc-kind-group")
			require.NoError(t, os.Chmod(p, 0o775))
			return "bc-kind-group"
		}},
		{name: "a file writable by others", why: "the file is writable by group or others (mode -rwxr-xrwx)", setup: func(t *testing.T, f *fixture) string {
			p := install(t, f.dir, examplePkg, "bc-kind-others")
			require.NoError(t, os.Chmod(p, 0o757))
			return "bc-kind-others"
		}},
		{name: "a symlink into a directory writable by others", why: "is writable by group or others (mode -rwxrwxrwx)", setup: func(t *testing.T, f *fixture) string {
			sub := filepath.Join(f.dir, "versions")
			require.NoError(t, os.Mkdir(sub, 0o755))
			require.NoError(t, os.Chmod(sub, 0o777))
			install(t, sub, examplePkg, "bc-kind-example-1")
			require.NoError(t, os.Symlink(filepath.Join("versions", "bc-kind-example-1"), filepath.Join(f.dir, "bc-kind-linked")))
			return "bc-kind-linked"
		}},
		{name: "a symlink into a directory owned by another user", why: fmt.Sprintf("directory %s is owned by uid %d", "versions", otherUID), setup: func(t *testing.T, f *fixture) string {
			needRoot(t)
			sub := filepath.Join(f.dir, "versions")
			require.NoError(t, os.Mkdir(sub, 0o755))
			install(t, sub, examplePkg, "bc-kind-example-1")
			require.NoError(t, os.Chown(sub, otherUID, otherUID))
			require.NoError(t, os.Symlink(filepath.Join("versions", "bc-kind-example-1"), filepath.Join(f.dir, "bc-kind-linked")))
			return "bc-kind-linked"
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := newFixture(t)
			name := c.setup(t, f)
			install(t, f.dir, testplugins.KindTest, "bc-kind-test")
			h, err := f.start(t, nil)
			require.ErrorIs(t, err, pluginhost.ErrRefused)
			why := refusedFor(t, h, name)
			require.Contains(t, why, strings.ReplaceAll(c.why, "directory versions", "directory "+filepath.Join(f.dir, "versions")))
			require.Len(t, h.Refused(), 1, "only the untrusted plugin is refused")
			requireLogLine(t, f.logs.String(), "refusing plugin", "plugin="+name, why)
			_, ok := h.Manifest("example.echo")
			require.False(t, ok, "the untrusted binary never ran")
			_, ok = h.Manifest("test.noop")
			require.True(t, ok, "the trusted plugin loads")
		})
	}
}

// requireLogLine requires one line of logs that holds every part.
func requireLogLine(t *testing.T, logs string, parts ...string) {
	t.Helper()
	for _, line := range strings.Split(logs, "\n") {
		all := true
		for _, p := range parts {
			all = all && strings.Contains(line, p)
		}
		if all {
			return
		}
	}
	t.Fatalf("no log line holds all of %q in:\n%s", parts, logs)
}

// A plugin directory writable by group or others refuses every plugin in
// it, each logged.
func TestHost_Trust_ADirectoryWritableByOthersRefusesEveryPlugin(t *testing.T) {
	f := newFixture(t)
	install(t, f.dir, examplePkg, "bc-kind-example")
	install(t, f.dir, testplugins.KindTest, "bc-kind-test")
	require.NoError(t, os.Chmod(f.dir, 0o770))
	h, err := f.start(t, nil)
	require.ErrorIs(t, err, pluginhost.ErrRefused)
	require.Empty(t, h.Manifests())
	for _, name := range []string{"bc-kind-example", "bc-kind-test"} {
		why := refusedFor(t, h, name)
		require.Contains(t, why, "its directory "+f.dir+" is writable by group or others (mode -rwxrwx---)")
		requireLogLine(t, f.logs.String(), "refusing plugin", "plugin="+name, why)
	}
}

// A file that becomes writable by others after it loaded is refused at its
// next restart, and its kinds fail plugin-unavailable at once instead of
// waiting for a restart that cannot come.
func TestHost_Trust_AFileMadeWritableLaterIsRefusedAtItsRestart(t *testing.T) {
	f := newFixture(t)
	p := install(t, f.dir, testplugins.KindTest, "bc-kind-test")
	h := mustStart(t, f, nil)
	pidFile := filepath.Join(t.TempDir(), "pid")
	_, err := execute(t, h, "test.sleep", fmt.Sprintf(`{"steps":0,"pidFile":%q}`, pidFile))
	require.NoError(t, err)
	require.NoError(t, os.Chmod(p, 0o777))
	require.NoError(t, syscall.Kill(readPids(t, pidFile)[0], syscall.SIGKILL))
	testutil.WaitFor(t, 20*time.Second, "a refused restart", func() bool {
		return strings.Contains(f.logs.String(), "plugin restart failed") && strings.Contains(f.logs.String(), "writable by group or others")
	})
	start := time.Now()
	res, err := h.Execute(context.Background(), kind.Command{ID: "cmd_untrusted", Kind: "test.noop", Payload: json.RawMessage(`{}`)}, nil)
	require.ErrorIs(t, err, pluginhost.ErrPluginUnavailable)
	require.Equal(t, kind.ReasonPluginUnavailable, res.Reason)
	require.Contains(t, res.Message, "writable by group or others")
	require.Less(t, time.Since(start), 5*time.Second, "not waited for")
}
