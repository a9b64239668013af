// Command fakelogind is a private D-Bus with a fake logind on it, so that
// make demo can run node.reboot on anyone's machine: bcd's reboot plugin is
// pointed at this bus (BCD_SYSTEM_BUS_ADDRESS), and a reboot it asks for is
// recorded and accepted, never passed to the host's logind. It starts a
// dbus-daemon listening in --dir, owns org.freedesktop.login1 on it, writes
// the bus's address to --dir/address once logind answers, logs each reboot
// asked for, and stops (the dbus-daemon with it) on SIGINT or SIGTERM.
//
//	fakelogind --dir /tmp/demo/bus
//	fakelogind --dir /tmp/demo/bus --refuse org.freedesktop.DBus.Error.AccessDenied
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/godbus/dbus/v5"
	"github.com/hashicorp/go-hclog"
	"github.com/spf13/pflag"

	"github.com/better-compute/commands/internal/fakebus"
)

// AddressFile is the file in --dir that holds the bus's address, written
// only once logind is on the bus: a caller waits for it to exist.
const AddressFile = "address"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := pflag.NewFlagSet("fakelogind", pflag.ContinueOnError)
	fs.SetOutput(stderr)
	dir := fs.String("dir", "", "directory for the bus's socket, config and address file (required)")
	refuse := fs.String("refuse", "", "answer every Reboot with this D-Bus error name instead of accepting it")
	fs.Usage = func() {
		fmt.Fprintf(stdout, "Usage: fakelogind --dir DIR [--refuse ERROR_NAME]\n\nFlags:\n%s", fs.FlagUsages())
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return 0
		}
		return 2
	}
	if *dir == "" {
		fmt.Fprintln(stderr, "fakelogind: --dir is required")
		return 2
	}
	logger := hclog.New(&hclog.LoggerOptions{Name: "fakelogind", Output: stderr, TimeFormat: time.RFC3339})
	if err := serve(ctx, *dir, *refuse, logger); err != nil {
		logger.Error("stopped", "error", err)
		return 1
	}
	return 0
}

// serve runs the bus and logind until ctx ends or the bus dies.
func serve(ctx context.Context, dir, refuse string, logger hclog.Logger) error {
	startCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	bus, err := fakebus.StartDaemon(startCtx, dir)
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
	var refusal *dbus.Error
	if refuse != "" {
		refusal = dbus.NewError(refuse, []any{"refused by fakelogind --refuse"})
	}
	if _, err := fakebus.ServeLogind(conn, refusal, func(interactive bool) {
		logger.Info("reboot asked for; nothing reboots", "interactive", interactive, "refused", refuse != "")
	}); err != nil {
		return err
	}
	// Written last and renamed into place, so a reader that sees the file
	// finds logind already answering.
	tmp := filepath.Join(dir, AddressFile+".tmp")
	if err := os.WriteFile(tmp, []byte(bus.Addr+"\n"), 0o644); err != nil {
		return fmt.Errorf("writing the address: %w", err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, AddressFile)); err != nil {
		return fmt.Errorf("writing the address: %w", err)
	}
	logger.Info("logind is on the private bus", "address", bus.Addr)
	select {
	case <-ctx.Done():
		logger.Info("stopping")
		return nil
	case <-bus.Done():
		return errors.New("dbus-daemon exited")
	}
}
