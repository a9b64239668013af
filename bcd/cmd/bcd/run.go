package main

import (
	"context"
	"errors"
	"io"
	"os"
	"os/signal"
	"syscall"
)

// cmdRun is the daemon: it loads the plugins, settles what the journal
// holds unfinished, and serves until SIGINT or SIGTERM. The session with the
// control plane plugs in here.
func cmdRun(args []string, stderr io.Writer) error {
	fs, cf := flags("run", "[flags]", stderr)
	if err := parse(fs, args); err != nil {
		return err
	}
	cfg, err := cf.Load()
	if err != nil {
		return &exitError{code: 2, err: err}
	}
	if err := cfg.Validate(); err != nil {
		return &exitError{code: 2, err: err}
	}
	logger := newLogger(cfg, stderr)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	s, rep, err := openStack(ctx, cfg, logger)
	if err != nil {
		return err
	}
	logger.Info("bcd is running", "rerun", len(rep.Rerun), "interrupted", len(rep.Interrupted), "rebooted", len(rep.Rebooted), "not_rebooted", len(rep.NotRebooted))
	if cfg.ControlPlane == "" {
		logger.Info("no control plane configured: serving local work only")
	}
	<-ctx.Done()
	logger.Info("stopping: unfinished commands stay in the journal for the next start")
	s.close()
	if errors.Is(ctx.Err(), context.Canceled) {
		return nil
	}
	return ctx.Err()
}
