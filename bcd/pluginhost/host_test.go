package pluginhost_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
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
	"github.com/better-compute/commands/sdk/wire"
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

// "A plugin that exits fails its in-flight commands with reason
// plugin-crashed and is restarted with backoff."
func TestHost_KillDash9MidCommand_FailsPluginCrashed_AndTheNextCommandRunsOnTheRestartedPlugin(t *testing.T) {
	f := newFixture(t)
	install(t, f.dir, testplugins.KindTest, "bc-kind-test")
	h := mustStart(t, f, nil)
	pidFile := filepath.Join(t.TempDir(), "pid")

	type outcome struct {
		res kind.Result
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		res, err := h.Execute(context.Background(), kind.Command{ID: "cmd_long", Kind: "test.sleep", Payload: json.RawMessage(fmt.Sprintf(`{"steps":100000,"stepMs":50,"pidFile":%q}`, pidFile))}, nil)
		done <- outcome{res, err}
	}()
	pid := readPids(t, pidFile)[0]
	require.NoError(t, syscall.Kill(pid, syscall.SIGKILL))

	var o outcome
	select {
	case o = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("Execute did not return after its plugin was killed")
	}
	require.ErrorIs(t, o.err, pluginhost.ErrPluginCrashed)
	require.Equal(t, kind.StatusFailed, o.res.Status)
	require.Equal(t, "plugin-crashed", o.res.Reason)

	// The next command waits for the restart and succeeds on a new process.
	pidFile2 := filepath.Join(t.TempDir(), "pid")
	res, err := execute(t, h, "test.sleep", fmt.Sprintf(`{"steps":0,"pidFile":%q}`, pidFile2))
	require.NoError(t, err)
	require.Equal(t, kind.StatusSucceeded, res.Status, res.Message)
	require.NotEqual(t, pid, readPids(t, pidFile2)[0], "a new plugin process")
	// The restart's log line may follow the first command it serves.
	testutil.WaitFor(t, 10*time.Second, "the restart's log line", func() bool { return strings.Contains(f.logs.String(), "plugin restarted") })
}

// "The daemon stops between actions and reports the real outcome, so a side
// effect that already happened is never hidden."
func TestHost_Cancel_StopsTheKind_AndReturnsThePluginsOwnOutcome(t *testing.T) {
	f := newFixture(t)
	install(t, f.dir, testplugins.KindTest, "bc-kind-test")
	h := mustStart(t, f, nil)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	start := time.Now()
	res, err := h.Execute(ctx, kind.Command{ID: "cmd_cancel", Kind: "test.sleep", Payload: json.RawMessage(`{"steps":100000,"stepMs":10}`)},
		func(percent int, message string) {
			if message == "step 2" {
				cancel()
			}
		})
	require.NoError(t, err, "the result is the plugin's own")
	require.Equal(t, kind.StatusCancelled, res.Status)
	var data struct{ Steps int }
	require.NoError(t, json.Unmarshal(res.Data, &data))
	require.GreaterOrEqual(t, data.Steps, 2, "the steps already done are reported")
	require.Less(t, data.Steps, 100000)
	require.Less(t, time.Since(start), 30*time.Second)

	// The plugin keeps serving.
	res, err = execute(t, h, "test.noop", `{}`)
	require.NoError(t, err)
	require.Equal(t, kind.StatusSucceeded, res.Status)
}

func TestHost_Cancel_PluginThatIgnoresIt_GetsCancelledAfterTheGrace(t *testing.T) {
	f := newFixture(t)
	f.cfg.CancelGrace = 200 * time.Millisecond
	install(t, f.dir, testplugins.KindTest, "bc-kind-test")
	h := mustStart(t, f, nil)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	res, err := h.Execute(ctx, kind.Command{ID: "cmd_stubborn", Kind: "test.sleep", Payload: json.RawMessage(`{"steps":1000,"stepMs":20,"ignoreCancel":true}`)},
		func(int, string) { cancel() })
	require.ErrorIs(t, err, wire.ErrNoOutcome)
	require.Equal(t, kind.StatusCancelled, res.Status)
	require.Equal(t, kind.ReasonCancelled, res.Reason)
}

func TestHost_Deadline_PluginReportsTimeout(t *testing.T) {
	f := newFixture(t)
	install(t, f.dir, testplugins.KindTest, "bc-kind-test")
	h := mustStart(t, f, nil)
	res, err := h.Execute(context.Background(), kind.Command{ID: "cmd_deadline", Kind: "test.sleep", Deadline: time.Now().Add(300 * time.Millisecond), Payload: json.RawMessage(`{"steps":100000,"stepMs":10}`)}, nil)
	require.NoError(t, err)
	require.Equal(t, kind.StatusFailed, res.Status)
	require.Equal(t, "timeout", res.Reason)
	require.NotEmpty(t, res.Data, "what ran is still reported")
}

// "The plugin's whole process group is killed, so children (nvidia-smi,
// dcgmi) never outlive it."
func TestHost_PluginWithAChild_LeavesNoOrphan(t *testing.T) {
	for _, how := range []string{"kill -9 of the plugin", "host Close"} {
		t.Run(how, func(t *testing.T) {
			f := newFixture(t)
			install(t, f.dir, testplugins.KindTest, "bc-kind-test")
			h := mustStart(t, f, nil)
			pidFile := filepath.Join(t.TempDir(), "pids")
			done := make(chan kind.Result, 1)
			go func() {
				res, _ := h.Execute(context.Background(), kind.Command{ID: "cmd_child", Kind: "test.child", Payload: json.RawMessage(fmt.Sprintf(`{"pidFile":%q}`, pidFile))}, nil)
				done <- res
			}()
			pids := readPids(t, pidFile)
			childPid, pluginPid := pids[0], pids[1]
			require.False(t, gone(childPid), "the child runs")

			if how == "host Close" {
				require.NoError(t, h.Close())
			} else {
				require.NoError(t, syscall.Kill(pluginPid, syscall.SIGKILL))
			}
			testutil.WaitFor(t, 20*time.Second, "the plugin's child to be gone", func() bool { return gone(childPid) })
			testutil.WaitFor(t, 20*time.Second, "the plugin to be gone", func() bool { return gone(pluginPid) })
			select {
			case res := <-done:
				require.Equal(t, kind.StatusFailed, res.Status)
				if how == "host Close" {
					require.Equal(t, "interrupted", res.Reason)
				} else {
					require.Equal(t, "plugin-crashed", res.Reason)
				}
			case <-time.After(30 * time.Second):
				t.Fatal("Execute did not return")
			}
		})
	}
}

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

// fakeServices is bcd's side of the Host service as a test sees it.
type fakeServices struct {
	mu  sync.Mutex
	put json.RawMessage
}

func (s *fakeServices) Inventory(context.Context) (json.RawMessage, time.Time, error) {
	return json.RawMessage(`{"gpus":["GPU-1"]}`), time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), nil
}

func (s *fakeServices) PutInventory(_ context.Context, inv json.RawMessage) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.put = append(json.RawMessage(nil), inv...)
	return nil
}

func (s *fakeServices) NodeSpec(context.Context) (int64, json.RawMessage, error) {
	return 7, json.RawMessage(`{"holds":[]}`), nil
}

func (s *fakeServices) Conditions(context.Context) ([]kind.Condition, error) {
	return []kind.Condition{{Type: "RebootRequired", Status: true, Reason: "huge-pages"}}, nil
}

func (s *fakeServices) Journal(context.Context, int) ([]json.RawMessage, error) { return nil, nil }

func TestHost_HostServiceReachesThePluginOverTheBroker(t *testing.T) {
	f := newFixture(t)
	install(t, f.dir, testplugins.KindTest, "bc-kind-test")
	svc := &fakeServices{}
	h := mustStart(t, f, svc)
	res, err := execute(t, h, "test.host", `{}`)
	require.NoError(t, err)
	require.Equal(t, kind.StatusSucceeded, res.Status, res.Message)
	var got struct {
		Inventory   json.RawMessage
		CollectedAt time.Time
		Generation  int64
		Spec        json.RawMessage
		Conditions  []kind.Condition
	}
	require.NoError(t, json.Unmarshal(res.Data, &got))
	require.JSONEq(t, `{"gpus":["GPU-1"]}`, string(got.Inventory))
	require.True(t, got.CollectedAt.Equal(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)))
	require.EqualValues(t, 7, got.Generation)
	require.JSONEq(t, `{"holds":[]}`, string(got.Spec))
	require.Equal(t, "RebootRequired", got.Conditions[0].Type)
	svc.mu.Lock()
	require.JSONEq(t, `{"gpus":["put-by-plugin"]}`, string(svc.put))
	svc.mu.Unlock()

	// After a restart the new process gets its own broker connection.
	pidFile := filepath.Join(t.TempDir(), "pid")
	_, err = execute(t, h, "test.sleep", fmt.Sprintf(`{"steps":0,"pidFile":%q}`, pidFile))
	require.NoError(t, err)
	require.NoError(t, syscall.Kill(readPids(t, pidFile)[0], syscall.SIGKILL))
	testutil.WaitFor(t, 20*time.Second, "the plugin to restart", func() bool { return strings.Contains(f.logs.String(), "plugin restarted") })
	res, err = execute(t, h, "test.host", `{}`)
	require.NoError(t, err)
	require.Equal(t, kind.StatusSucceeded, res.Status, res.Message)
}

func TestHost_HostServiceAbsent_PluginGetsAnError(t *testing.T) {
	f := newFixture(t)
	install(t, f.dir, testplugins.KindTest, "bc-kind-test")
	h := mustStart(t, f, nil)
	res, err := execute(t, h, "test.host", `{}`)
	require.NoError(t, err)
	require.Equal(t, kind.StatusFailed, res.Status)
	require.Contains(t, res.Message, "no host service")
}

func TestHost_Panic_IsAFailedResult_AndThePluginKeepsServing(t *testing.T) {
	f := newFixture(t)
	install(t, f.dir, testplugins.KindTest, "bc-kind-test")
	h := mustStart(t, f, nil)
	pidFile := filepath.Join(t.TempDir(), "pid")
	_, err := execute(t, h, "test.sleep", fmt.Sprintf(`{"steps":0,"pidFile":%q}`, pidFile))
	require.NoError(t, err)
	before := readPids(t, pidFile)[0]

	res, err := execute(t, h, "test.panic", `{}`)
	require.NoError(t, err)
	require.Equal(t, kind.StatusFailed, res.Status)
	require.Equal(t, kind.ReasonPanic, res.Reason)

	require.NoError(t, os.Remove(pidFile))
	_, err = execute(t, h, "test.sleep", fmt.Sprintf(`{"steps":0,"pidFile":%q}`, pidFile))
	require.NoError(t, err)
	require.Equal(t, before, readPids(t, pidFile)[0], "the same process still serves")

	// The plugin's stderr lands in bcd's log under the binary's name.
	testutil.WaitFor(t, 10*time.Second, "the panic in bcd's log", func() bool {
		logs := f.logs.String()
		return strings.Contains(logs, "pluginhost.bc-kind-test") && strings.Contains(logs, "handler panicked")
	})
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
