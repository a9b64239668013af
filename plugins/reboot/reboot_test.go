package reboot_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
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
	require.True(t, strings.HasPrefix(r.Message, "asking logind for the reboot: "), r.Message)
	// The detail is in the result, not only in bcd's log.
	var res reboot.FailureResult
	require.NoError(t, json.Unmarshal(r.Data, &res), string(r.Data))
	require.Equal(t, reboot.ViaLogind, res.Path)
	require.Equal(t, reboot.ErrNameAccessDenied, res.DBusError)
	require.Contains(t, res.Error, "org.freedesktop.login1.Manager.Reboot: org.freedesktop.DBus.Error.AccessDenied: Permission denied")
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
	var res reboot.FailureResult
	require.NoError(t, json.Unmarshal(r.Data, &res), string(r.Data))
	require.Equal(t, reboot.FailureResult{Error: res.Error, Path: reboot.ViaSystemdStart, JobResult: "failed"}, res)
	require.Contains(t, res.Error, `ended "failed"`)
	require.True(t, strings.HasPrefix(r.Message, "asking systemd for the reboot: "), r.Message)
}

// Neither logind nor systemd: the bus's error for systemd's StartUnit is
// reported with its D-Bus name (a session dbus-daemon tries to activate
// systemd and answers Spawn.ChildExited; a system bus answers ServiceUnknown).
func TestNeitherLogindNorSystemd(t *testing.T) {
	addr := startBus(t)
	r := run(t, addr)
	require.Equal(t, kind.StatusFailed, r.Status)
	require.Equal(t, reboot.ReasonRefused, r.Reason)
	require.Contains(t, r.Message, reboot.SystemdStart+": org.freedesktop.DBus.Error.ServiceUnknown")
	var res reboot.FailureResult
	require.NoError(t, json.Unmarshal(r.Data, &res), string(r.Data))
	require.Equal(t, reboot.ViaSystemdStart, res.Path, "logind was absent, so systemd's path failed")
	require.Equal(t, "org.freedesktop.DBus.Error.ServiceUnknown", res.DBusError)
}

// A bus that cannot be reached is no-bus, not a refusal.
func TestNoBus(t *testing.T) {
	r := run(t, "unix:path=/nonexistent/bus")
	require.Equal(t, kind.StatusFailed, r.Status)
	require.Equal(t, reboot.ReasonNoBus, r.Reason)
	require.Contains(t, r.Message, "asking logind for the reboot: connecting to D-Bus at unix:path=/nonexistent/bus")
	// The result says what happened; it used to be null.
	var res reboot.FailureResult
	require.NoError(t, json.Unmarshal(r.Data, &res), string(r.Data))
	require.Equal(t, reboot.ViaLogind, res.Path)
	require.Empty(t, res.DBusError)
	require.Contains(t, res.Error, "connecting to D-Bus at unix:path=/nonexistent/bus")
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
