package main_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/internal/testutil"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testutil.CleanupBuilds()
	os.Exit(code)
}

type logBuffer struct {
	lock sync.Mutex
	b    strings.Builder
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.lock.Lock()
	defer l.lock.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.lock.Lock()
	defer l.lock.Unlock()
	return l.b.String()
}

func pidOf(t *testing.T, file string) int {
	b, err := os.ReadFile(file)
	if err != nil {
		return 0
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return pid
}

// Issue 35: "the fake systemd manager that the in-place upgrade's handoff
// needs exist[s] only as [a] Go test librar[y]". bc-fake-systemd serves
// its manager on a private bus: start, restart and stop (asked through the
// binary, as systemctl would) run the registered service, which sees the
// bus's address; a service whose process is killed is started again, as
// Restart=on-failure does; a bad invocation says what is missing.
func TestFakeSystemdBinaryRunsTheService(t *testing.T) {
	if _, err := exec.LookPath("dbus-daemon"); err != nil {
		t.Skip("dbus-daemon is not installed")
	}
	bin := testutil.BuildBinary(t, "./internal/tools/bc-fake-systemd")
	dir, work := t.TempDir(), t.TempDir()
	pidFile, envFile := filepath.Join(work, "pid"), filepath.Join(work, "env")
	// The environment first, the pid last: the test reads the env file
	// once the pid file is there (CI read it between the two writes).
	script := "echo \"$BCD_SYSTEM_BUS_ADDRESS\" > " + envFile + "; echo $$ > " + pidFile + ".tmp && mv " + pidFile + ".tmp " + pidFile + "; exec sleep 600"
	logs := &logBuffer{}
	srv := exec.Command(bin, "serve", "--dir", dir, "--unit", "demo.service", "--", "/bin/sh", "-c", script)
	srv.Stderr = logs
	require.NoError(t, srv.Start())
	done := make(chan error, 1)
	go func() { done <- srv.Wait() }()
	t.Cleanup(func() {
		_ = srv.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = srv.Process.Kill()
			<-done
		}
		if t.Failed() {
			t.Logf("bc-fake-systemd:\n%s", logs.String())
		}
	})
	testutil.WaitFor(t, 30*time.Second, "the address file", func() bool {
		_, err := os.Stat(filepath.Join(dir, "address"))
		return err == nil
	})
	ctl := func(args ...string) (string, int) {
		cmd := exec.Command(bin, args...)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		if ee, ok := err.(*exec.ExitError); ok {
			return out.String(), ee.ExitCode()
		}
		require.NoError(t, err)
		return out.String(), 0
	}
	out, code := ctl("start", "--dir", dir, "demo.service")
	require.Equal(t, 0, code, out)
	testutil.WaitFor(t, 10*time.Second, "the service to start", func() bool { return pidOf(t, pidFile) != 0 })
	first := pidOf(t, pidFile)
	addr, err := os.ReadFile(filepath.Join(dir, "address"))
	require.NoError(t, err)
	env, err := os.ReadFile(envFile)
	require.NoError(t, err)
	require.Equal(t, strings.TrimSpace(string(addr)), strings.TrimSpace(string(env)), "the service sees the bus's address")

	out, code = ctl("restart", "--dir", dir, "demo.service")
	require.Equal(t, 0, code, out)
	testutil.WaitFor(t, 10*time.Second, "the restarted service", func() bool { return pidOf(t, pidFile) != first })
	second := pidOf(t, pidFile)
	require.Error(t, syscall.Kill(first, 0), "the old process is gone")

	require.NoError(t, syscall.Kill(second, syscall.SIGKILL))
	testutil.WaitFor(t, 10*time.Second, "Restart=on-failure", func() bool { p := pidOf(t, pidFile); return p != second && p != 0 })
	third := pidOf(t, pidFile)
	out, code = ctl("stop", "--dir", dir, "demo.service")
	require.Equal(t, 0, code, out)
	testutil.WaitFor(t, 40*time.Second, "the service to stop", func() bool { return syscall.Kill(third, 0) != nil })

	out, code = ctl("start", "--dir", dir, "nope.service")
	require.Equal(t, 1, code)
	require.Contains(t, out, "nope.service")
	out, code = ctl("serve", "--dir", t.TempDir())
	require.Equal(t, 2, code)
	require.Contains(t, out, "--unit NAME.service and the command after -- are required")
}
