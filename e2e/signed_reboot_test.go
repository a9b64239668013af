package e2e

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"
	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/internal/testutil"
)

// fakeLogind is org.freedesktop.login1.Manager as far as node.reboot uses
// it: Reboot(interactive) accepted and counted.
type fakeLogind struct{ calls atomic.Int32 }

func (f *fakeLogind) Reboot(interactive bool) *dbus.Error {
	f.calls.Add(1)
	return nil
}

// startLogind starts a private dbus-daemon with a fake logind on it and
// returns the bus address; t.Skip when dbus-daemon is missing.
func startLogind(t *testing.T) (string, *fakeLogind) {
	t.Helper()
	bin, err := exec.LookPath("dbus-daemon")
	if err != nil {
		t.Skip("dbus-daemon is not installed: node.reboot needs a bus")
	}
	cmd := exec.Command(bin, "--session", "--nofork", "--print-address")
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	lines := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(stdout).ReadString('\n')
		lines <- strings.TrimSpace(line)
	}()
	var addr string
	select {
	case addr = <-lines:
	case <-time.After(30 * time.Second):
		t.Fatal("dbus-daemon printed no address within 30s")
	}
	require.NotEmpty(t, addr)
	conn, err := dbus.Connect(addr)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	f := &fakeLogind{}
	require.NoError(t, conn.Export(f, "/org/freedesktop/login1", "org.freedesktop.login1.Manager"))
	reply, err := conn.RequestName("org.freedesktop.login1", dbus.NameFlagDoNotQueue)
	require.NoError(t, err)
	require.Equal(t, dbus.RequestNameReplyPrimaryOwner, reply)
	return addr, f
}

// node.reboot signed, the reboot dance of TestE2E_RebootByNewBootID with
// the real plugin: logind accepts the reboot, bcd restarts on a new boot id
// and the command completes succeeded with rebooted: true.
func TestE2E_SignedNodeReboot(t *testing.T) {
	addr, logind := startLogind(t)
	c := newSignedCluster(t)
	n := c.signedNode()
	env := baseEnv(t)
	env["BCD_NVIDIA_SMI"] = "mock"
	env["BCD_SYSTEM_BUS_ADDRESS"] = addr
	n.configure(env)
	n.start()
	c.nodeTrust()

	cmd := c.run("node.reboot", map[string]any{})
	testutil.WaitFor(t, 60*time.Second, "logind to be asked for the reboot", func() bool { return logind.calls.Load() > 0 })
	c.waitState(cmd.GetId(), "running")
	n.stop()
	require.NoError(t, os.WriteFile(n.boot, []byte("boot-2\n"), 0o600))
	n.start()

	got := c.succeeded(cmd.GetId())
	var rebooted bool
	require.NoError(t, c.srv.Pool.QueryRow(context.Background(), `SELECT rebooted FROM commands WHERE id = $1`, cmd.GetId()).Scan(&rebooted))
	require.True(t, rebooted, "rebooted: true (reason %q)", got.GetReason())
	require.Equal(t, int32(1), logind.calls.Load(), "one reboot asked for")
	require.Equal(t, 1, c.settledCount(cmd.GetId()))
}
