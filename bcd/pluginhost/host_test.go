package pluginhost_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/bcd/pluginhost"
	"github.com/better-compute/commands/internal/testplugins"
	"github.com/better-compute/commands/internal/testutil"
	"github.com/better-compute/commands/sdk/example"
	"github.com/better-compute/commands/sdk/kind"
)

const examplePkg = "./sdk/example/cmd/bc-kind-example"

func TestMain(m *testing.M) {
	code := m.Run()
	testutil.CleanupBuilds()
	os.Exit(code)
}

// install copies a built binary into dir under name, as a package would.
func install(t testing.TB, dir, pkg, name string) string {
	t.Helper()
	src := testutil.BuildBinary(t, pkg)
	b, err := os.ReadFile(src)
	require.NoError(t, err)
	dst := filepath.Join(dir, name)
	require.NoError(t, os.WriteFile(dst, b, 0o755))
	require.NoError(t, os.Chmod(dst, 0o755))
	return dst
}

// syncBuffer is a bytes.Buffer safe for the concurrent writes of a logger.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

type fixture struct {
	dir  string
	logs *syncBuffer
	cfg  pluginhost.Config
}

func newFixture(t testing.TB) *fixture {
	return &fixture{
		dir:  t.TempDir(),
		logs: &syncBuffer{},
		cfg: pluginhost.Config{
			RestartBackoffMin: 20 * time.Millisecond,
			RestartBackoffMax: 200 * time.Millisecond,
			StartTimeout:      20 * time.Second,
			CancelGrace:       10 * time.Second,
			LogLevel:          "debug",
		},
	}
}

// start starts a host on the fixture's directory; Close runs at cleanup.
func (f *fixture) start(t testing.TB, services kind.Host) (*pluginhost.Host, error) {
	t.Helper()
	f.cfg.Dir = f.dir
	logger := hclog.New(&hclog.LoggerOptions{Output: f.logs, Level: hclog.Debug})
	h := pluginhost.New(logger, f.cfg, services)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err := h.Start(ctx)
	t.Cleanup(func() { require.NoError(t, h.Close()) })
	return h, err
}

func mustStart(t testing.TB, f *fixture, services kind.Host) *pluginhost.Host {
	t.Helper()
	h, err := f.start(t, services)
	require.NoError(t, err)
	return h
}

func execute(t testing.TB, h *pluginhost.Host, kindName, payload string) (kind.Result, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return h.Execute(ctx, kind.Command{ID: "cmd_" + kindName + strconv.FormatInt(time.Now().UnixNano(), 36), Kind: kindName, NodeID: "node_test", Payload: json.RawMessage(payload)}, nil)
}

// readPids waits for a pid file the test plugin writes and returns its pids.
func readPids(t testing.TB, path string) []int {
	t.Helper()
	var pids []int
	testutil.WaitFor(t, 20*time.Second, "pid file "+path, func() bool {
		b, err := os.ReadFile(path)
		if err != nil {
			return false
		}
		pids = nil
		for _, f := range strings.Fields(string(b)) {
			n, err := strconv.Atoi(f)
			require.NoError(t, err)
			pids = append(pids, n)
		}
		return len(pids) > 0
	})
	return pids
}

// gone reports whether pid no longer runs: no such process, or a zombie
// waiting for a reaper that is not ours (a container's init may not reap).
func gone(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return true
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	// The state follows the parenthesised command name.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i > 0 && len(s) > i+2 && s[i+2] == 'Z'
}

func TestHost_Start_ReadsManifestsSortedAndTheSameValuesTheControlPlaneRegisters(t *testing.T) {
	f := newFixture(t)
	install(t, f.dir, examplePkg, "bc-kind-example")
	install(t, f.dir, testplugins.KindTest, "bc-kind-test")
	require.NoError(t, os.WriteFile(filepath.Join(f.dir, "README"), []byte("not a plugin"), 0o644))
	require.NoError(t, os.Mkdir(filepath.Join(f.dir, "subdir"), 0o755))
	h := mustStart(t, f, nil)

	var names []string
	for _, m := range h.Manifests() {
		names = append(names, m.Kind)
	}
	require.Equal(t, []string{"example.echo", "example.noop", "test.child", "test.env", "test.host", "test.noop", "test.panic", "test.sleep"}, names)
	m, ok := h.Manifest("example.echo")
	require.True(t, ok)
	require.Equal(t, example.EchoManifest.Digest(), m.Digest(), "the served manifest is the exported Go value")
	_, ok = h.Manifest("nope.nothing")
	require.False(t, ok)
}

func TestHost_Execute_ReturnsThePluginsResultAndProgress(t *testing.T) {
	f := newFixture(t)
	install(t, f.dir, examplePkg, "bc-kind-example")
	h := mustStart(t, f, nil)

	var mu sync.Mutex
	var percents []int
	res, err := h.Execute(context.Background(), kind.Command{ID: "cmd_echo", Kind: "example.echo", Payload: json.RawMessage(`{"message":"hello","sleepMs":20}`)},
		func(percent int, _ string) {
			mu.Lock()
			defer mu.Unlock()
			percents = append(percents, percent)
		})
	require.NoError(t, err)
	require.Equal(t, kind.StatusSucceeded, res.Status, res.Message)
	require.JSONEq(t, `{"message":"hello","steps":10}`, string(res.Data))
	mu.Lock()
	require.Equal(t, []int{10, 20, 30, 40, 50, 60, 70, 80, 90, 100}, percents)
	mu.Unlock()

	res, err = execute(t, h, "example.echo", `{"sleepMs":5}`)
	require.NoError(t, err, "a refused payload is the plugin's own result")
	require.Equal(t, kind.StatusFailed, res.Status)
	require.Equal(t, kind.ReasonInvalidPayload, res.Reason)
	require.Contains(t, res.Message, "message")

	res, err = execute(t, h, "example.noop", `{}`)
	require.NoError(t, err)
	require.Equal(t, kind.StatusSucceeded, res.Status)
}

func TestHost_Execute_UnknownKind(t *testing.T) {
	f := newFixture(t)
	install(t, f.dir, examplePkg, "bc-kind-example")
	h := mustStart(t, f, nil)
	res, err := execute(t, h, "diag.nothing", `{}`)
	require.ErrorIs(t, err, pluginhost.ErrUnknownKind)
	require.Equal(t, kind.StatusFailed, res.Status)
	require.Equal(t, kind.ReasonUnknownKind, res.Reason)
}

// "Plugins get an allowlisted environment, not bcd's."
func TestHost_PluginsGetAnAllowlistedEnvironment(t *testing.T) {
	t.Setenv("BCD_TEST_SECRET", "do-not-leak")
	f := newFixture(t)
	f.cfg.Env = []string{"VENDOR_OPTION=1"}
	install(t, f.dir, testplugins.KindTest, "bc-kind-test")
	h := mustStart(t, f, nil)
	res, err := execute(t, h, "test.env", `{}`)
	require.NoError(t, err)
	var got struct{ Env []string }
	require.NoError(t, json.Unmarshal(res.Data, &got))
	joined := strings.Join(got.Env, "\n")
	require.NotContains(t, joined, "do-not-leak")
	require.Contains(t, got.Env, "VENDOR_OPTION=1")
	require.Contains(t, got.Env, "BCD_PLUGIN_LOG_LEVEL=debug")
	require.Contains(t, joined, "PATH=")
}

func TestHost_Close_IsIdempotent_AndExecuteAfterItIsInterrupted(t *testing.T) {
	f := newFixture(t)
	install(t, f.dir, examplePkg, "bc-kind-example")
	h := mustStart(t, f, nil)
	require.NoError(t, h.Close())
	require.NoError(t, h.Close())
	res, err := execute(t, h, "example.noop", `{}`)
	require.ErrorIs(t, err, pluginhost.ErrClosed)
	require.Equal(t, "interrupted", res.Reason)
}
