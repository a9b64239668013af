package toolexec

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/internal/testutil"
)

func script(t *testing.T, body string) (path, dir string) {
	t.Helper()
	dir = t.TempDir()
	path = filepath.Join(dir, "tool")
	require.NoError(t, os.WriteFile(path, []byte("#!/bin/sh\n"+body), 0o755))
	return path, dir
}

// gone reports whether pid has exited (absent, or a zombie nobody reaped yet).
func gone(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i >= 0 && i+2 < len(s) && s[i+2] == 'Z'
}

func TestRunReturnsOutputAndExitCode(t *testing.T) {
	path, _ := script(t, "echo out; echo err >&2; exit 9\n")
	res, err := Run(context.Background(), 5*time.Second, path)
	require.NoError(t, err)
	require.Equal(t, 9, res.ExitCode)
	require.Equal(t, "out\n", string(res.Stdout))
	require.Equal(t, "err\n", string(res.Stderr))
}

// "an exec helper that runs nvidia-smi/dcgmi with a timeout and kills the
// whole process group, so a hung tool never outlives the call"
func TestRunKillsTheWholeProcessGroupOfAHungTool(t *testing.T) {
	path, dir := script(t, "sleep 1000 &\necho $! > \"$(dirname \"$0\")/child.pid\"\necho started\nwait\n")
	res, err := Run(context.Background(), 300*time.Millisecond, path)
	require.ErrorIs(t, err, ErrTimeout)
	require.Equal(t, -1, res.ExitCode)
	require.Equal(t, "started\n", string(res.Stdout))
	b, rerr := os.ReadFile(filepath.Join(dir, "child.pid"))
	require.NoError(t, rerr)
	child, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	require.Positive(t, child)
	// No orphan: the backgrounded sleep died with its group.
	testutil.WaitFor(t, 5*time.Second, "the hung tool's child to die", func() bool { return gone(child) })
}

func TestRunKillsChildrenLeftBehindByALeaderThatExited(t *testing.T) {
	path, dir := script(t, "sleep 1000 >/dev/null 2>&1 &\necho $! > \"$(dirname \"$0\")/child.pid\"\nexit 0\n")
	res, err := Run(context.Background(), 5*time.Second, path)
	require.NoError(t, err)
	require.Equal(t, 0, res.ExitCode)
	b, rerr := os.ReadFile(filepath.Join(dir, "child.pid"))
	require.NoError(t, rerr)
	child, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	testutil.WaitFor(t, 5*time.Second, "the left-behind child to die", func() bool { return gone(child) })
}

func TestRunReportsAMissingTool(t *testing.T) {
	_, err := Run(context.Background(), time.Second, filepath.Join(t.TempDir(), "nvidia-smi"))
	require.ErrorIs(t, err, ErrNotFound)
	_, err = Run(context.Background(), time.Second, "no-such-tool-bc-test")
	require.ErrorIs(t, err, ErrNotFound)
}

func TestRunStopsWhenTheContextEnds(t *testing.T) {
	path, _ := script(t, "exec sleep 1000\n")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := Run(ctx, time.Minute, path)
		done <- err
	}()
	cancel()
	select {
	case err := <-done:
		require.ErrorIs(t, err, context.Canceled)
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}
}

func TestCappedOutput(t *testing.T) {
	c := capped{limit: 4}
	n, err := c.Write([]byte("abcdef"))
	require.NoError(t, err)
	require.Equal(t, 6, n)
	_, _ = c.Write([]byte("gh"))
	require.Equal(t, "abcd", c.String())
}

// Tool's errors name the command line, and Text joins what it printed.
func TestToolNamesTheCommandLineAndJoinsItsOutput(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "dcgmi")
	_, err := Tool{Path: missing}.Run(context.Background(), "diag", "-r", "2")
	require.ErrorIs(t, err, ErrNotFound)
	require.True(t, strings.HasPrefix(err.Error(), missing+" diag -r 2: "), err.Error())

	path, _ := script(t, "echo '  out  '; echo ' err' >&2; exit 3\n")
	res, err := Tool{Path: path, Timeout: 5 * time.Second}.Run(context.Background())
	require.NoError(t, err, "a non-zero exit is not an error")
	require.Equal(t, 3, res.ExitCode)
	require.Equal(t, "out\nerr", res.Text())
}
