// Command bc-fake-systemd is a private D-Bus with a fake systemd manager on
// it (internal/fakesystemd), so that daemon.upgrade's in-place handoff can
// be tried on one machine without touching the host's systemd: `serve`
// starts a dbus-daemon in --dir, owns org.freedesktop.systemd1 there,
// registers one service (the command line after --, which it starts again
// at each start, so a path through the install directory's current symlink
// runs whichever version it points at), writes the bus's address to
// --dir/address once the manager answers, and runs what the upgrade asks
// for: the helper as a transient unit, RestartUnit of the service (its
// whole process group killed first, as KillMode=control-group does), and a
// restart of a service whose process died, as Restart=on-failure does.
// start, restart and stop ask it, as systemctl would. Point bcd's
// pluginEnv BCD_SYSTEM_BUS_ADDRESS at the address.
//
//	bc-fake-systemd serve --dir "$DEMO/systemd" --unit bcd.service -- /var/lib/bcd/install/current/bcd run --config /etc/bcd/bcd.yaml
//	bc-fake-systemd start --dir "$DEMO/systemd" bcd.service
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/godbus/dbus/v5"
	"github.com/hashicorp/go-hclog"
	"github.com/spf13/pflag"

	"github.com/better-compute/commands/internal/fakesystemd"
)

// AddressFile is the file in --dir that holds the bus's address, written
// once the manager answers: a caller waits for it to exist.
const AddressFile = "address"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

const usage = `Usage:
  bc-fake-systemd serve --dir DIR --unit NAME [--start] -- COMMAND [ARGS...]
  bc-fake-systemd start|restart|stop --dir DIR NAME
`

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" {
		fmt.Fprint(stdout, usage)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	verb := args[0]
	fs := pflag.NewFlagSet("bc-fake-systemd "+verb, pflag.ContinueOnError)
	fs.SetOutput(stderr)
	dir := fs.String("dir", "", "directory of the bus's socket, config and address file (required)")
	unit := fs.String("unit", "", "serve: the service's name (bcd.service)")
	start := fs.Bool("start", false, "serve: start the service once the manager answers")
	if err := fs.Parse(args[1:]); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return 0
		}
		return 2
	}
	if *dir == "" {
		fmt.Fprintln(stderr, "bc-fake-systemd: --dir is required")
		return 2
	}
	logger := hclog.New(&hclog.LoggerOptions{Name: "bc-fake-systemd", Output: stderr, TimeFormat: time.RFC3339})
	switch verb {
	case "serve":
		argv := fs.Args()
		if *unit == "" || !strings.HasSuffix(*unit, ".service") || len(argv) == 0 {
			fmt.Fprintln(stderr, "bc-fake-systemd serve: --unit NAME.service and the command after -- are required")
			return 2
		}
		if err := serve(ctx, *dir, *unit, argv, *start, logger); err != nil {
			logger.Error("stopped", "error", err)
			return 1
		}
		return 0
	case "start", "restart", "stop":
		if fs.NArg() != 1 {
			fmt.Fprintf(stderr, "bc-fake-systemd %s: name one unit\n", verb)
			return 2
		}
		if err := call(ctx, *dir, verb, fs.Arg(0)); err != nil {
			fmt.Fprintf(stderr, "bc-fake-systemd %s %s: %v\n", verb, fs.Arg(0), err)
			return 1
		}
		fmt.Fprintf(stdout, "%s %s\n", verb, fs.Arg(0))
		return 0
	}
	fmt.Fprintf(stderr, "bc-fake-systemd: unknown command %q\n%s", verb, usage)
	return 2
}

// serve runs the bus and the manager until ctx ends or the bus dies; the
// services it started stop with it.
func serve(ctx context.Context, dir, unit string, argv []string, start bool, logger hclog.Logger) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("making --dir: %w", err)
	}
	startCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	bus, err := fakesystemd.StartBus(startCtx, dir)
	cancel()
	if err != nil {
		return err
	}
	defer bus.Close()
	conn, err := dbus.Connect(bus.Addr, dbus.WithContext(ctx))
	if err != nil {
		return fmt.Errorf("connecting to the private bus: %w", err)
	}
	defer conn.Close()
	mgr, err := fakesystemd.Serve(conn, []string{"BCD_SYSTEM_BUS_ADDRESS=" + bus.Addr}, os.Stderr)
	if err != nil {
		return err
	}
	defer mgr.StopAll()
	mgr.AddService(unit, func() []string { return argv })
	// Written last and renamed into place, so a reader that sees the file
	// finds the manager already answering.
	tmp := filepath.Join(dir, AddressFile+".tmp")
	if err := os.WriteFile(tmp, []byte(bus.Addr+"\n"), 0o644); err != nil {
		return fmt.Errorf("writing the address: %w", err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, AddressFile)); err != nil {
		return fmt.Errorf("writing the address: %w", err)
	}
	logger.Info("systemd's manager is on the private bus", "address", bus.Addr, "unit", unit, "exec", strings.Join(argv, " "))
	if start {
		if _, derr := mgr.StartUnit(unit, "replace"); derr != nil {
			return fmt.Errorf("starting %s: %w", unit, derr)
		}
	}
	select {
	case <-ctx.Done():
		logger.Info("stopping", "calls", strings.Join(mgr.Calls(), "; "))
		return nil
	case <-bus.Done():
		return errors.New("dbus-daemon exited")
	}
}

// call asks the manager at dir's address to start, restart or stop name.
func call(ctx context.Context, dir, verb, name string) error {
	b, err := os.ReadFile(filepath.Join(dir, AddressFile))
	if err != nil {
		return fmt.Errorf("reading the bus's address (is bc-fake-systemd serve running?): %w", err)
	}
	conn, err := dbus.Connect(strings.TrimSpace(string(b)), dbus.WithContext(ctx))
	if err != nil {
		return fmt.Errorf("connecting to the private bus: %w", err)
	}
	defer conn.Close()
	method := map[string]string{"start": "StartUnit", "restart": "RestartUnit", "stop": "StopUnit"}[verb]
	var job dbus.ObjectPath
	if err := conn.Object(fakesystemd.Service, fakesystemd.Path).CallWithContext(ctx, fakesystemd.Interface+"."+method, 0, name, "replace").Store(&job); err != nil {
		return err
	}
	return nil
}
