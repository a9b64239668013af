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
