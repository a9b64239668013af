// Package fakesystemd stands in for the system bus and systemd's manager
// as far as daemon.upgrade calls them: a private dbus-daemon, and a
// Manager on it that really runs what it is asked to. StartTransientUnit
// runs the unit's ExecStart as a process of its own (outside the caller's
// process group, as a transient unit is outside bcd's cgroup), and
// RestartUnit stops and starts a service the test registered, killing its
// whole process group as KillMode=control-group does; a service whose main
// process dies unexpectedly is started again, as Restart=on-failure does.
// Tests point the plugin and the helper at it with BCD_SYSTEM_BUS_ADDRESS.
package fakesystemd

import (
	"context"

	"github.com/better-compute/commands/internal/fakebus"
)

// ErrNoDaemon is wrapped when dbus-daemon is not installed; tests skip on it.
var ErrNoDaemon = fakebus.ErrNoDaemon

// Bus is a private dbus-daemon (internal/fakebus's, which the reboot
// plugin's tests and fakelogind use too); Addr is its address, for
// dbus.Connect or BCD_SYSTEM_BUS_ADDRESS.
type Bus = fakebus.Daemon

// StartBus starts a dbus-daemon listening on dir/bus.sock and returns
// once it printed its address; ctx bounds the start only. It dies with
// the calling process (Pdeathsig).
func StartBus(ctx context.Context, dir string) (*Bus, error) {
	return fakebus.StartDaemon(ctx, dir)
}
