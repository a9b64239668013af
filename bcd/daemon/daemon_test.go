package daemon

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/better-compute/commands/bcd/accept"
	"github.com/better-compute/commands/bcd/journal"
	"github.com/better-compute/commands/bcd/pluginhost"
	"github.com/better-compute/commands/internal/testutil"
)

// pluginDir holds the real plugin binaries, built once for the package.
var pluginDir string

func TestMain(m *testing.M) {
	code := m.Run()
	// Issue 32: no goroutine outlives the tests (goleak).
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: goroutines outlived the tests: %v\n", err)
			code = 1
		}
	}
	if pluginDir != "" {
		_ = os.RemoveAll(pluginDir)
	}
	testutil.CleanupBuilds()
	os.Exit(code)
}

func plugins(t testing.TB) string {
	t.Helper()
	if pluginDir != "" {
		return pluginDir
	}
	dir, err := os.MkdirTemp("", "bcd-daemon-plugins-")
	require.NoError(t, err)
	for _, pkg := range []string{"./sdk/example/cmd/bc-kind-example", "./internal/testplugins/bcdcore_plugin"} {
		src := testutil.BuildBinary(t, pkg)
		b, err := os.ReadFile(src)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(dir, filepath.Base(src)), b, 0o755))
	}
	pluginDir = dir
	return dir
}

// node is one bcd: journal, node state, plugin host and daemon over a state
// directory, the real plugins loaded.
type node struct {
	t     testing.TB
	dir   string
	j     *journal.Journal
	state *State
	host  *pluginhost.Host
	d     *Daemon
}

const nodeID = "node_test"

func logger(t testing.TB) hclog.Logger {
	if testing.Verbose() {
		return hclog.New(&hclog.LoggerOptions{Name: t.Name(), Level: hclog.Debug})
	}
	return hclog.New(&hclog.LoggerOptions{Output: io.Discard})
}

// start opens a node on dir (a new one when ""), recovers it, and closes it
// at the test's end unless stopped first.
func start(t testing.TB, dir string, mod func(*Config)) *node {
	t.Helper()
	if dir == "" {
		dir = t.TempDir()
	}
	lg := logger(t)
	j, err := journal.Open(lg, dir, journal.Options{})
	require.NoError(t, err)
	st, err := NewState(dir, j)
	require.NoError(t, err)
	host := pluginhost.New(lg, pluginhost.Config{Dir: plugins(t)}, st)
	require.NoError(t, host.Start(context.Background()))
	cfg := Config{NodeID: nodeID, Role: "node", BootID: "boot-1"}
	if mod != nil {
		mod(&cfg)
	}
	d, err := New(lg, cfg, j, st, host)
	require.NoError(t, err)
	n := &node{t: t, dir: dir, j: j, state: st, host: host, d: d}
	t.Cleanup(n.stop)
	return n
}

func (n *node) stop() {
	if n.d == nil {
		return
	}
	require.NoError(n.t, n.d.Close())
	require.NoError(n.t, n.host.Close())
	require.NoError(n.t, n.j.Close())
	n.d = nil
}

func cmd(id, kindName string, payload any) accept.Command {
	b, _ := json.Marshal(payload)
	return accept.Command{ID: id, NodeID: nodeID, Kind: kindName, Payload: b, NotAfter: time.Now().Add(10 * time.Minute)}
}

// collect reads updates until the channel closes, with a deadline.
func collect(t testing.TB, ch <-chan Update) []Update {
	t.Helper()
	var out []Update
	timeout := time.After(60 * time.Second)
	for {
		select {
		case u, ok := <-ch:
			if !ok {
				return out
			}
			out = append(out, u)
		case <-timeout:
			t.Fatalf("no outcome after 60s; got %+v", out)
		}
	}
}

func last(t testing.TB, us []Update) Update {
	t.Helper()
	require.NotEmpty(t, us)
	return us[len(us)-1]
}

func states(us []Update) []journal.State {
	var out []journal.State
	for _, u := range us {
		if u.Progress == nil {
			out = append(out, u.State)
		}
	}
	return out
}

// holdFiles are a bcdcore.hold payload's files in a fresh directory.
type holdFiles struct {
	CountFile   string `json:"countFile"`
	StartedFile string `json:"startedFile"`
	ReleaseFile string `json:"releaseFile,omitempty"`
}

func newHold(t testing.TB, release bool) holdFiles {
	dir := t.TempDir()
	h := holdFiles{CountFile: filepath.Join(dir, "count"), StartedFile: filepath.Join(dir, "started")}
	if release {
		h.ReleaseFile = filepath.Join(dir, "release")
	}
	return h
}

func (h holdFiles) runs(t testing.TB) int {
	b, err := os.ReadFile(h.CountFile)
	if os.IsNotExist(err) {
		return 0
	}
	require.NoError(t, err)
	return strings.Count(string(b), "\n")
}

func (h holdFiles) waitStarted(t testing.TB) {
	testutil.WaitFor(t, 30*time.Second, "the kind to start", func() bool {
		_, err := os.Stat(h.StartedFile)
		return err == nil
	})
}

func (h holdFiles) release(t testing.TB) {
	require.NoError(t, os.WriteFile(h.ReleaseFile, nil, 0o600))
}

func TestSubmit_WholePath(t *testing.T) {
	n := start(t, "", nil)
	ch, err := n.d.Submit(context.Background(), cmd("cmd_echo", "example.echo", map[string]any{"message": "hello"}))
	require.NoError(t, err)
	us := collect(t, ch)
	require.Equal(t, []journal.State{journal.StateAccepted, journal.StateRunning, journal.StateSucceeded}, states(us))
	out := last(t, us)
	require.True(t, out.Terminal())
	require.JSONEq(t, `{"message":"hello","steps":0}`, string(out.Result))
	require.Len(t, out.ResultSHA256, 64)

	rec, found, err := n.j.Get("cmd_echo")
	require.NoError(t, err)
	require.True(t, found)
	require.Equal(t, journal.StateSucceeded, rec.State)
	require.Equal(t, out.ResultSHA256, rec.ResultSHA256)
	require.Equal(t, "boot-1", rec.BootID)
	require.Equal(t, 1, rec.Attempts)
	require.True(t, rec.Flags.RetrySafe)
}

func TestSubmit_BadPayloadFailsWithThePluginsReason(t *testing.T) {
	n := start(t, "", nil)
	ch, err := n.d.Submit(context.Background(), cmd("cmd_bad", "example.echo", map[string]any{"nope": 1}))
	require.NoError(t, err)
	out := last(t, collect(t, ch))
	require.Equal(t, journal.StateFailed, out.State)
	require.Equal(t, "invalid-payload", out.Reason)
}

func TestSubmit_DuplicateAnsweredFromTheJournal(t *testing.T) {
	// Spec: "The daemon's journal answers a duplicate with the stored result".
	n := start(t, "", nil)
	h := newHold(t, false)
	c := cmd("cmd_dup", "bcdcore.hold", h)
	ch, err := n.d.Submit(context.Background(), c)
	require.NoError(t, err)
	first := last(t, collect(t, ch))
	require.Equal(t, journal.StateSucceeded, first.State)
	require.False(t, first.Duplicate)

	for i := 0; i < 3; i++ {
		ch, err = n.d.Submit(context.Background(), c)
		require.NoError(t, err)
		us := collect(t, ch)
		require.Len(t, us, 1, "the stored answer, nothing else")
		require.True(t, us[0].Duplicate)
		require.Equal(t, first.State, us[0].State)
		require.Equal(t, first.ResultSHA256, us[0].ResultSHA256)
		require.JSONEq(t, string(first.Result), string(us[0].Result))
	}
	require.Equal(t, 1, h.runs(t), "the kind ran once")

	// And after a restart of bcd, from the file.
	dir := n.dir
	n.stop()
	n = start(t, dir, nil)
	_, err = n.d.Recover(context.Background())
	require.NoError(t, err)
	ch, err = n.d.Submit(context.Background(), c)
	require.NoError(t, err)
	us := collect(t, ch)
	require.Len(t, us, 1)
	require.True(t, us[0].Duplicate)
	require.Equal(t, first.ResultSHA256, us[0].ResultSHA256)
	require.Equal(t, 1, h.runs(t))
}

func TestSubmit_DuplicateReattachesToTheRunningCommand(t *testing.T) {
	// Spec: "... or re-attaches to a running one."
	n := start(t, "", nil)
	h := newHold(t, true)
	c := cmd("cmd_attach", "bcdcore.hold", h)
	ch1, err := n.d.Submit(context.Background(), c)
	require.NoError(t, err)
	h.waitStarted(t)
	require.Equal(t, []string{"cmd_attach"}, n.d.InFlight(), "Hello's in_flight")
	ch2, err := n.d.Submit(context.Background(), c)
	require.NoError(t, err)
	h.release(t)
	us1, us2 := collect(t, ch1), collect(t, ch2)
	require.True(t, us2[0].Duplicate, "the re-attached watcher first gets the current state")
	require.Equal(t, journal.StateRunning, us2[0].State)
	require.Equal(t, last(t, us1).ResultSHA256, last(t, us2).ResultSHA256)
	require.Equal(t, journal.StateSucceeded, last(t, us2).State)
	require.Equal(t, 1, h.runs(t), "the kind ran once")
	require.Empty(t, n.d.InFlight())
}
