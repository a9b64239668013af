// Command bcd-upgrader is daemon.upgrade's helper. The plugin starts it as
// a transient systemd unit (never a child in bcd's cgroup): it activates
// the prepared version, restarts bcd and waits for the new daemon to
// rejoin, or rolls back. It exits 0 when the upgrade reached an outcome
// (rolled back included) and 1 when it could not.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	sdbus "github.com/coreos/go-systemd/v22/dbus"
	"github.com/hashicorp/go-hclog"
	"github.com/spf13/pflag"

	"github.com/better-compute/commands/bcd/upgrader"
	"github.com/better-compute/commands/internal/upgrade"
)

func main() {
	fs := pflag.NewFlagSet("bcd-upgrader", pflag.ContinueOnError)
	dir := fs.String("install-dir", upgrade.DefaultRoot, "bcd's versioned install directory")
	unit := fs.String("unit", "bcd.service", "bcd's unit")
	bus := fs.String("bus", "", "D-Bus address of systemd (default: the system bus)")
	if err := fs.Parse(os.Args[1:]); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return
		}
		os.Exit(2)
	}
	logger := hclog.New(&hclog.LoggerOptions{Name: "bcd-upgrader", Output: os.Stderr})
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	st, err := upgrader.Run(ctx, upgrader.Config{
		Layout: upgrade.Layout{Root: *dir}, Unit: *unit, Logger: logger,
		Connect: func(ctx context.Context) (*sdbus.Conn, error) { return upgrader.Connect(ctx, *bus) },
	})
	if errors.Is(err, upgrader.ErrNothingToDo) {
		logger.Info("no prepared upgrade", "step", st.Step, "outcome", st.Outcome)
		return
	}
	if err != nil {
		logger.Error("the upgrade did not reach an outcome", "error", err)
		fmt.Fprintln(os.Stderr, "bcd-upgrader:", err)
		os.Exit(1)
	}
	logger.Info("upgrade finished", "command_id", st.CommandID, "outcome", st.Outcome, "from", st.From, "to", st.To)
}
