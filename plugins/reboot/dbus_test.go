package reboot_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"
	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/internal/fakebus"
	"github.com/better-compute/commands/plugins/reboot"
)

// startBus starts a private dbus-daemon and returns its address; Cleanup
// kills it. The fakes below own logind's and systemd's names on it.
func startBus(t *testing.T) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	d, err := fakebus.StartDaemon(ctx, t.TempDir())
	if errors.Is(err, fakebus.ErrNoDaemon) {
		t.Skip("dbus-daemon is not installed")
	}
	require.NoError(t, err)
	t.Cleanup(d.Close)
	return d.Addr
}

func connect(t *testing.T, addr string) *dbus.Conn {
	t.Helper()
	conn, err := dbus.Connect(addr)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// startLogind serves a fake logind on addr that answers every Reboot with
// err (nil accepts).
func startLogind(t *testing.T, addr string, err *dbus.Error) *fakebus.Logind {
	t.Helper()
	f, serr := fakebus.ServeLogind(connect(t, addr), err, nil)
	require.NoError(t, serr)
	return f
}

// startSystemd serves a fake systemd on addr whose jobs end with result.
func startSystemd(t *testing.T, addr, result string) *fakebus.Systemd {
	t.Helper()
	f, err := fakebus.ServeSystemd(connect(t, addr), result)
	require.NoError(t, err)
	return f
}

// A reboot cancelled while logind holds the call is cancelled, never failed:
// the connection is dialled under the command's context and closes with it,
// so the call may fail with the closed connection's read error before godbus
// sees the context (the conformance harness caught it once as "use of closed
// network connection"). Repeated, to meet both orders.
func TestACancelledRebootIsCancelledWhicheverErrorComesFirst(t *testing.T) {
	addr := startBus(t)
	unblock := make(chan struct{})
	t.Cleanup(func() { close(unblock) })
	called := make(chan struct{}, 64)
	_, err := fakebus.ServeLogind(connect(t, addr), nil, func(bool) {
		called <- struct{}{}
		<-unblock
	})
	require.NoError(t, err)
	for i := 0; i < 20; i++ {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			_, err := reboot.Reboot(ctx, reboot.Config{BusAddress: addr}, nil)
			done <- err
		}()
		select {
		case <-called:
		case <-time.After(10 * time.Second):
			t.Fatal("the Reboot call never reached the fake logind")
		}
		cancel()
		select {
		case err := <-done:
			require.ErrorIs(t, err, context.Canceled, "attempt %d", i)
		case <-time.After(10 * time.Second):
			t.Fatal("Reboot did not return after its context was cancelled")
		}
	}
}
