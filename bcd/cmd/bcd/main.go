// Command bcd is the better-compute node daemon. `bcd run` is the daemon;
// `bcd exec` runs one kind locally through the same acceptance checks,
// lane, journal and plugin path; `bcd kinds` lists the loaded kinds;
// `bcd reload` makes the running daemon reload its plugins; `bcd journal`
// shows the journal.
package main

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/spf13/pflag"

	"github.com/better-compute/commands/bcd/config"
	"github.com/better-compute/commands/internal/version"
)

const usage = `bcd is the better-compute node daemon.

Usage:
  bcd run                       run the daemon: load the plugins, settle the journal, hold the
                                control plane session (after bcd join), wait for signals
  bcd join --token T --server ADDR --ca-file F
                                exchange a one-time join token for the node certificate
  bcd exec KIND [--payload JSON] run one command locally, through acceptance, lane, journal and plugin
  bcd kinds [--json]            list the loaded kinds and their manifests; exits 1 when a
                                plugin was refused, naming it and why
  bcd reload [--json]           make the running bcd reload its plugin directory (SIGHUP):
                                running commands finish on the old plugins, new ones go
                                to the new; exits 1 when a plugin was refused
  bcd journal [--limit N] [--json]
                                show the most recent journal records (bcd run must be stopped)
  bcd self-check                load the config, the journal and the plugins with their pins,
                                as daemon.upgrade does with a staged version before activating
                                it; exits 1 naming what failed
  bcd --version                 print the version

Every command takes the config flags (bcd COMMAND --help lists them); a flag
overrides the config file's setting.
`

// exitError carries an exit status.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit status %d", e.code)
	}
	return e.err.Error()
}

func main() {
	err := run(os.Args[1:], os.Stdout, os.Stderr)
	if err == nil {
		return
	}
	code := 1
	var ee *exitError
	if errors.As(err, &ee) {
		code = ee.code
		err = ee.err
	}
	if err != nil && !errors.Is(err, pflag.ErrHelp) {
		fmt.Fprintln(os.Stderr, "bcd:", err)
	}
	os.Exit(code)
}

func run(args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return &exitError{code: 2}
	}
	switch args[0] {
	case "--version", "-v", "version":
		fmt.Fprintln(stdout, "bcd", version.Version)
		return nil
	case "--help", "-h", "help":
		fmt.Fprint(stdout, usage)
		return nil
	case "run":
		return cmdRun(args[1:], stderr)
	case "join":
		return cmdJoin(args[1:], stdout, stderr)
	case "exec":
		return cmdExec(args[1:], stdout, stderr)
	case "kinds":
		return cmdKinds(args[1:], stdout, stderr)
	case "reload":
		return cmdReload(args[1:], stdout, stderr)
	case "journal":
		return cmdJournal(args[1:], stdout, stderr)
	case "self-check":
		return cmdSelfCheck(args[1:], stdout, stderr)
	}
	fmt.Fprint(stderr, usage)
	return &exitError{code: 2, err: fmt.Errorf("unknown command %q", args[0])}
}

// flags returns a flag set with the config flags registered.
func flags(name, synopsis string, stderr io.Writer) (*pflag.FlagSet, *config.Flags) {
	fs := pflag.NewFlagSet("bcd "+name, pflag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: bcd %s %s\n\nFlags:\n", name, synopsis)
		fs.PrintDefaults()
	}
	return fs, config.RegisterFlags(fs)
}

// parse parses args; usage errors exit 2.
func parse(fs *pflag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return &exitError{code: 0, err: pflag.ErrHelp}
		}
		return &exitError{code: 2, err: err}
	}
	return nil
}
