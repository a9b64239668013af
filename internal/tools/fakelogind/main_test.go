package main_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/internal/testutil"
	"github.com/better-compute/commands/plugins/reboot"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testutil.CleanupBuilds()
	os.Exit(code)
}

// logBuffer is the tool's stderr, read while it runs.
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

// start runs fakelogind in a new directory and returns the bus's address
// once the address file says logind answers.
func start(t *testing.T, args ...string) (addr string, cmd *exec.Cmd, logs *logBuffer, exited <-chan error) {
	t.Helper()
	if _, err := exec.LookPath("dbus-daemon"); err != nil {
		t.Skip("dbus-daemon is not installed")
	}
	bin := testutil.BuildBinary(t, "./internal/tools/fakelogind")
	dir := t.TempDir()
	logs = &logBuffer{}
	cmd = exec.Command(bin, append([]string{"--dir", dir}, args...)...)
	cmd.Stderr = logs
	require.NoError(t, cmd.Start())
	// done yields Wait's error to the test, once; gone is closed after
	// Wait, for the cleanup.
	done, gone := make(chan error, 1), make(chan struct{})
	go func() {
		done <- cmd.Wait()
		close(gone)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-gone
	})
	var b []byte
	testutil.WaitFor(t, 30*time.Second, "the address file", func() bool {
		var err error
		b, err = os.ReadFile(filepath.Join(dir, "address"))
		return err == nil
	})
	return strings.TrimSpace(string(b)), cmd, logs, done
}

// node.reboot's own code, pointed at the tool's bus, reboots through the
// fake logind: accepted, logged, and nothing else happens; SIGTERM stops the
// tool and its dbus-daemon.
func TestRebootIsAcceptedAndLogged(t *testing.T) {
	addr, cmd, logs, exited := start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	out, err := reboot.Reboot(ctx, reboot.Config{BusAddress: addr}, nil)
	require.NoError(t, err)
	require.Equal(t, reboot.ViaLogind, out.Via)
	testutil.WaitFor(t, 10*time.Second, "the reboot in the log", func() bool {
		return strings.Contains(logs.String(), "reboot asked for; nothing reboots: interactive=false")
	})

	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	select {
	case err := <-exited:
		require.NoError(t, err, logs.String())
	case <-ctx.Done():
		t.Fatal("fakelogind did not stop on SIGTERM")
	}
	_, err = reboot.Reboot(ctx, reboot.Config{BusAddress: addr}, nil)
	require.Error(t, err, "the bus went with it")
}

// --refuse answers like a logind that polkit denies.
func TestRefuse(t *testing.T) {
	addr, _, _, _ := start(t, "--refuse", reboot.ErrNameAccessDenied)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, err := reboot.Reboot(ctx, reboot.Config{BusAddress: addr}, nil)
	var be *reboot.BusError
	require.True(t, errors.As(err, &be), "%v", err)
	require.Equal(t, reboot.ErrNameAccessDenied, be.Name)
}

func TestDirIsRequired(t *testing.T) {
	bin := testutil.BuildBinary(t, "./internal/tools/fakelogind")
	out, err := exec.Command(bin).CombinedOutput()
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee)
	require.Equal(t, 2, ee.ExitCode())
	require.Contains(t, string(out), "--dir is required")
}
