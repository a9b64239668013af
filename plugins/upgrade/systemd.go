package upgrade

import (
	"context"
	"fmt"
	"regexp"

	sdbus "github.com/coreos/go-systemd/v22/dbus"
	"github.com/godbus/dbus/v5"
)

// Connect opens go-systemd's connection to systemd on the system bus, or
// on addr when it is set.
func Connect(ctx context.Context, addr string) (*sdbus.Conn, error) {
	if addr == "" {
		c, err := sdbus.NewSystemConnectionContext(ctx)
		if err != nil {
			return nil, fmt.Errorf("connecting to systemd on the system bus: %w", err)
		}
		return c, nil
	}
	c, err := sdbus.NewConnection(func() (*dbus.Conn, error) { return dbus.Connect(addr, dbus.WithContext(ctx)) })
	if err != nil {
		return nil, fmt.Errorf("connecting to systemd at %s: %w", addr, err)
	}
	return c, nil
}

var unsafeUnitChars = regexp.MustCompile(`[^A-Za-z0-9_-]`)

// HelperUnit is the transient unit's name for a command.
func HelperUnit(commandID string) string {
	return "bcd-upgrade-" + unsafeUnitChars.ReplaceAllString(commandID, "_") + ".service"
}

// startHelper starts argv as the transient unit name and waits for
// systemd's job to end: "done" means the helper runs in a cgroup of its
// own, outside bcd's, so restarting bcd cannot kill it.
func startHelper(ctx context.Context, busAddr, name string, argv []string) error {
	conn, err := Connect(ctx, busAddr)
	if err != nil {
		return err
	}
	defer conn.Close()
	props := []sdbus.Property{
		sdbus.PropDescription("bcd upgrade helper (daemon.upgrade)"),
		sdbus.PropExecStart(argv, true),
		{Name: "CollectMode", Value: dbus.MakeVariant("inactive-or-failed")},
	}
	done := make(chan string, 1)
	if _, err := conn.StartTransientUnitContext(ctx, name, "fail", props, done); err != nil {
		return fmt.Errorf("starting the transient unit %s: %w", name, err)
	}
	select {
	case res := <-done:
		if res != "done" {
			return fmt.Errorf("systemd's job for %s ended %q, not \"done\": see journalctl -u %s", name, res, name)
		}
		return nil
	case <-ctx.Done():
		return fmt.Errorf("waiting for %s to start: %w", name, ctx.Err())
	}
}
