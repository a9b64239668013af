package reboot_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"
	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/internal/fakebus"
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
