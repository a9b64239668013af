package reboot_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"
	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/plugins/reboot"
	"github.com/better-compute/commands/plugins/reboot/manifest"
	"github.com/better-compute/commands/sdk/kind"
)

func run(t *testing.T, addr string) kind.Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req := kind.Request{
		Command:  kind.Command{ID: "cmd_test", Kind: manifest.KindName, NodeID: "node_test", Payload: json.RawMessage(`{}`)},
		Progress: kind.ProgressFunc(func(int, string) {}),
		Logger:   hclog.NewNullLogger(),
	}
	return kind.Run(ctx, reboot.Handler(reboot.Config{BusAddress: addr}), req)
}

func TestManifest(t *testing.T) {
	m := manifest.Manifest
	require.NoError(t, m.Validate())
	require.Equal(t, "node.reboot", m.Kind)
	// "self-terminating, destructive, APIRunnable, NOT retry-safe"
	require.True(t, m.Flags.SelfTerminating)
	require.True(t, m.Flags.Destructive)
	require.False(t, m.Flags.RetrySafe, "a reboot must not run twice after a crash")
	require.True(t, m.APIRunnable)
	require.Equal(t, kind.LaneControl, m.Lane)
}

// Success via logind: Reboot(interactive=false) is called once and the
// command reports accepted, since the reboot itself ends the process.
func TestRebootThroughLogind(t *testing.T) {
	addr := startBus(t)
	logind := startLogind(t, addr, nil)
	systemd := startSystemd(t, addr, "done")

	r := run(t, addr)
	require.Equal(t, kind.StatusSucceeded, r.Status, r.Message)
	require.JSONEq(t, `{"accepted":true,"via":"logind"}`, string(r.Data))
	require.Equal(t, []bool{false}, logind.Calls(), "Reboot(interactive=false), once")
	require.Empty(t, systemd.Units(), "no fallback when logind answered")
}

// AccessDenied from logind is reported with the D-Bus error name and says
// what to do; it does not fall back to systemd, which would bypass polkit.
func TestLogindAccessDenied(t *testing.T) {
	addr := startBus(t)
	startLogind(t, addr, dbus.NewError(reboot.ErrNameAccessDenied, []any{"Permission denied"}))
	systemd := startSystemd(t, addr, "done")

	r := run(t, addr)
	require.Equal(t, kind.StatusFailed, r.Status)
	require.Equal(t, reboot.ReasonRefused, r.Reason)
	require.Contains(t, r.Message, "org.freedesktop.DBus.Error.AccessDenied")
	require.Contains(t, r.Message, "Permission denied")
	require.Contains(t, r.Message, "bcd must run as root, or polkit must allow")
	require.JSONEq(t, `{"dbusError":"org.freedesktop.DBus.Error.AccessDenied"}`, string(r.Data))
	require.Empty(t, systemd.Units(), "a refusal from logind must stand")
}

// Without logind on the bus, systemd's reboot.target is started in
// systemctl reboot's job mode and its JobRemoved result is awaited.
func TestFallbackToSystemdWithoutLogind(t *testing.T) {
	addr := startBus(t)
	systemd := startSystemd(t, addr, "done")

	r := run(t, addr)
	require.Equal(t, kind.StatusSucceeded, r.Status, r.Message)
	require.JSONEq(t, `{"accepted":true,"via":"systemd","jobResult":"done"}`, string(r.Data))
	require.Equal(t, []string{"reboot.target replace-irreversibly"}, systemd.Units())
}

// A reboot job that ends "failed" fails the command and names the result.
func TestSystemdJobFailed(t *testing.T) {
	addr := startBus(t)
	startSystemd(t, addr, "failed")

	r := run(t, addr)
	require.Equal(t, kind.StatusFailed, r.Status)
	require.Equal(t, reboot.ReasonJobFailed, r.Reason)
	require.Contains(t, r.Message, `ended "failed"`)
	require.JSONEq(t, `{"jobResult":"failed"}`, string(r.Data))
}

// Neither logind nor systemd: the bus's error for systemd's StartUnit is
// reported with its D-Bus name (a session dbus-daemon tries to activate
// systemd and answers Spawn.ChildExited; a system bus answers ServiceUnknown).
func TestNeitherLogindNorSystemd(t *testing.T) {
	addr := startBus(t)
	r := run(t, addr)
	require.Equal(t, kind.StatusFailed, r.Status)
	require.Equal(t, reboot.ReasonRefused, r.Reason)
	require.Contains(t, r.Message, reboot.SystemdStart+": org.freedesktop.DBus.Error.")
}

// A bus that cannot be reached is no-bus, not a refusal.
func TestNoBus(t *testing.T) {
	r := run(t, "unix:path=/nonexistent/bus")
	require.Equal(t, kind.StatusFailed, r.Status)
	require.Equal(t, reboot.ReasonNoBus, r.Reason)
}

func TestBusErrorUnwrapsAsBusError(t *testing.T) {
	addr := startBus(t)
	startLogind(t, addr, dbus.NewError(reboot.ErrNameInteractive, []any{"interactive authentication required"}))
	_, err := reboot.Reboot(context.Background(), reboot.Config{BusAddress: addr}, nil)
	var be *reboot.BusError
	require.True(t, errors.As(err, &be))
	require.Equal(t, reboot.LogindReboot, be.Call)
	require.Equal(t, reboot.ErrNameInteractive, be.Name)
}
