package main

import (
	"net"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The unit is Type=notify: `bcd run` tells systemd READY=1 once the plugins
// are loaded and the journal settled, and STOPPING=1 on SIGTERM. A unix
// datagram socket stands in for systemd's NOTIFY_SOCKET.
func TestRun_NotifiesSystemdReadyAndStopping(t *testing.T) {
	e := newEnv(t)
	sock := filepath.Join(t.TempDir(), "notify.sock")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	require.NoError(t, err)
	defer conn.Close()

	run := e.command("run")
	run.Env = append(os.Environ(), "NOTIFY_SOCKET="+sock)
	require.NoError(t, run.Start())
	defer func() { _ = run.Process.Kill(); _ = run.Wait() }()

	read := func() string {
		t.Helper()
		buf := make([]byte, 256)
		require.NoError(t, conn.SetReadDeadline(time.Now().Add(30*time.Second)))
		n, _, err := conn.ReadFromUnix(buf)
		require.NoError(t, err, "waiting for sd_notify from bcd run")
		return string(buf[:n])
	}
	require.Equal(t, "READY=1", read())
	require.NoError(t, run.Process.Signal(syscall.SIGTERM))
	require.Equal(t, "STOPPING=1", read())
	require.NoError(t, run.Wait())
}
