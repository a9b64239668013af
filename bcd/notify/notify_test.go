package notify

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/require"
)

// listen stands in for systemd: a datagram socket at NOTIFY_SOCKET whose
// messages arrive on the returned channel.
func listen(t *testing.T) <-chan string {
	t.Helper()
	// A short directory: a unix socket path must fit in 108 bytes.
	dir, err := os.MkdirTemp("", "sdn")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	path := filepath.Join(dir, "notify")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	t.Setenv("NOTIFY_SOCKET", path)
	got := make(chan string, 64)
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := conn.Read(buf)
			if err != nil {
				return
			}
			got <- string(buf[:n])
		}
	}()
	return got
}

func next(t *testing.T, got <-chan string) string {
	t.Helper()
	select {
	case m := <-got:
		return m
	case <-time.After(10 * time.Second):
		t.Fatal("no notification within 10s")
		return ""
	}
}

func TestReady_OutsideSystemdIsANoOp(t *testing.T) {
	t.Setenv("NOTIFY_SOCKET", "")
	ok, err := Ready()
	require.NoError(t, err)
	require.False(t, ok)
	ok, err = Stopping()
	require.NoError(t, err)
	require.False(t, ok)
}

// "Type=notify, with bcd sending READY": systemd reads READY=1 on its socket.
func TestReady_SendsREADY(t *testing.T) {
	got := listen(t)
	ok, err := Ready()
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, "READY=1", next(t, got))
	ok, err = Stopping()
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, "STOPPING=1", next(t, got))
}

func TestReady_UnreachableSocketIsAnError(t *testing.T) {
	t.Setenv("NOTIFY_SOCKET", filepath.Join(t.TempDir(), "absent"))
	_, err := Ready()
	require.ErrorContains(t, err, "READY=1")
}

func TestStartWatchdog_NotEnabledStartsNothing(t *testing.T) {
	listen(t)
	t.Setenv("WATCHDOG_USEC", "")
	every, err := StartWatchdog(t.Context(), hclog.NewNullLogger(), func() error {
		t.Error("healthy called without a watchdog")
		return nil
	})
	require.NoError(t, err)
	require.Zero(t, every)
}

// A watchdog meant for another process (WATCHDOG_PID) is not ours to ping.
func TestStartWatchdog_OtherProcessIsNotOurs(t *testing.T) {
	listen(t)
	t.Setenv("WATCHDOG_USEC", "2000000")
	t.Setenv("WATCHDOG_PID", strconv.Itoa(os.Getpid()+1))
	every, err := StartWatchdog(t.Context(), nil, nil)
	require.NoError(t, err)
	require.Zero(t, every)
}

func TestStartWatchdog_BadSettingIsAnError(t *testing.T) {
	t.Setenv("WATCHDOG_USEC", "soon")
	t.Setenv("WATCHDOG_PID", strconv.Itoa(os.Getpid()))
	_, err := StartWatchdog(t.Context(), nil, nil)
	require.Error(t, err)
}

// "bcd sending ... WATCHDOG": pings at half of WatchdogSec while healthy.
func TestStartWatchdog_PingsAtHalfTheInterval(t *testing.T) {
	got := listen(t)
	t.Setenv("WATCHDOG_USEC", "100000")
	t.Setenv("WATCHDOG_PID", strconv.Itoa(os.Getpid()))
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	every, err := StartWatchdog(ctx, hclog.NewNullLogger(), nil)
	require.NoError(t, err)
	require.Equal(t, 50*time.Millisecond, every)
	for range 3 {
		require.Equal(t, "WATCHDOG=1", next(t, got))
	}
}

// An unhealthy daemon must not be kept alive by the timer: no ping goes out
// until the health check passes again.
func TestStartWatchdog_WithholdsPingsWhileUnhealthy(t *testing.T) {
	got := listen(t)
	t.Setenv("WATCHDOG_USEC", "20000")
	t.Setenv("WATCHDOG_PID", strconv.Itoa(os.Getpid()))
	const failing = 4
	var calls atomic.Int64
	healthy := func() error {
		if calls.Add(1) <= failing {
			return errors.New("journal stuck")
		}
		return nil
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	_, err := StartWatchdog(ctx, hclog.NewNullLogger(), healthy)
	require.NoError(t, err)
	require.Equal(t, "WATCHDOG=1", next(t, got))
	// The first ping follows the first passing check, so every failing one
	// came before it.
	require.Greater(t, calls.Load(), int64(failing))
}
