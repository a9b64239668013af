package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/better-compute/commands/bcd/conditions"
	"github.com/better-compute/commands/bcd/handoff"
	"github.com/better-compute/commands/bcd/metrics"
	"github.com/better-compute/commands/bcd/notify"
	"github.com/better-compute/commands/bcd/secrets"
	"github.com/better-compute/commands/bcd/session"
	"github.com/better-compute/commands/internal/testhook"
	"github.com/better-compute/commands/internal/tracing"
	"github.com/better-compute/commands/internal/upgrade"
	"github.com/better-compute/commands/internal/version"
	agentv1 "github.com/better-compute/commands/proto/bc/agent/v1"
)

// cmdRun is the daemon: it loads the plugins, settles what the journal
// holds unfinished, holds the session with the control plane when one is
// configured (or was joined), reloads its plugin directory on SIGHUP, and
// serves until SIGINT or SIGTERM.
func cmdRun(args []string, stderr io.Writer) error {
	fs, cf := flags("run", "[flags]", stderr)
	if err := parse(fs, args); err != nil {
		return err
	}
	cfg, err := cf.Load()
	if err != nil {
		return &exitError{code: 2, err: err}
	}
	j, joinedNode, err := loadJoined(cfg.StateDir)
	if err != nil {
		return &exitError{code: 2, err: err}
	}
	if joinedNode {
		// The certificate is the node's identity: the config may repeat
		// it, never contradict it.
		if cfg.NodeID != "" && cfg.NodeID != j.id.NodeID {
			return &exitError{code: 2, err: fmt.Errorf("nodeId %s: the node certificate is for %s", cfg.NodeID, j.id.NodeID)}
		}
		cfg.NodeID = j.id.NodeID
		if j.id.Role != "" {
			cfg.Role = j.id.Role
		}
		if cfg.ControlPlane == "" {
			cfg.ControlPlane = j.info.Server
		}
	}
	if err := cfg.Validate(); err != nil {
		return &exitError{code: 2, err: err}
	}
	if err := checkPluginDir(cfg.PluginDir); err != nil {
		return &exitError{code: 2, err: err}
	}
	if cfg.ControlPlane != "" && !joinedNode {
		return &exitError{code: 2, err: fmt.Errorf("controlPlane %s: this node has no certificate; run bcd join first", cfg.ControlPlane)}
	}
	logger := newLogger(cfg, stderr)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	hup, stopHup := notifyHangup()
	defer stopHup()
	key, err := signerOf(j)
	if err != nil {
		return &exitError{code: 2, err: err}
	}
	nt, err := openTrust(cfg, cfg.NodeID, key, logger)
	if err != nil {
		return &exitError{code: 2, err: err}
	}
	if len(j.id.AllowedKinds) > 0 {
		logger.Info("restricted identity: the node certificate allows only some kinds", "allowed_kinds", j.id.AllowedKinds)
	}
	var client atomic.Pointer[session.Client]
	var (
		m      *metrics.Metrics
		metLis net.Listener
	)
	if cfg.MetricsListen != "" {
		if metLis, err = metrics.Listen(cfg.MetricsListen); err != nil {
			return &exitError{code: 2, err: err}
		}
		m = metrics.New()
		m.Session(func() metrics.Session {
			if c := client.Load(); c != nil {
				return c
			}
			return nil
		})
	}
	tp, err := tracing.New(ctx, "bcd", version.Version, cfg.Tracing)
	if err != nil {
		return &exitError{code: 2, err: err}
	}
	defer func() {
		// Flush the last spans; a collector that is away costs them, not
		// the stop.
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := tp.Shutdown(sctx); err != nil {
			logger.Warn("flushing traces", "error", err)
		}
	}()
	if cfg.Tracing.OTLPEndpoint != "" {
		logger.Info("exporting traces", "otlp_endpoint", cfg.Tracing.OTLPEndpoint)
	}
	var upgrades *handoff.Upgrades
	if cfg.InstallDir != "" {
		upgrades = &handoff.Upgrades{Layout: upgrade.Layout{Root: cfg.InstallDir}, Version: version.Version,
			NeverRejoin: testhook.Is(testhook.NeverRejoin), Logger: logger}
	}
	var exchanger *secrets.Exchanger
	if cfg.ControlPlane != "" {
		exchanger = secrets.New(cfg.NodeID, logger)
	}
	var sd *stack
	opts := stackOptions{
		tracer:  tp.Tracer("github.com/better-compute/commands/bcd"),
		metrics: m,
		allowed: j.id.AllowedKinds,
		trust:   nt,
		onSpec: func(have int64) {
			if c := client.Load(); c != nil {
				c.RequestSpec(have)
			}
		},
		beforeRecover: func(s *stack) {
			sd = s
			if cfg.ControlPlane == "" {
				return
			}
			client.Store(session.New(session.Config{
				Address: cfg.ControlPlane, TLS: j.tls, NodeID: cfg.NodeID, Role: cfg.Role, Version: version.Version,
				Kinds: s.host.Manifests, RefusedPlugins: func() []*agentv1.PluginRefusal { return pluginRefusals(cfg.StateDir, s.host) }, Conditions: conditions.New(conditions.Config{Logger: logger}), Logger: logger,
				Trust: nt.store, NodeKey: nt.key, Secrets: exchanger, OnWelcome: func() {
					if upgrades != nil && sd != nil {
						upgrades.Rejoined(sd.d)
					}
				},
			}, s.d))
		},
	}
	if upgrades != nil {
		opts.handoff = upgrades
	}
	if exchanger != nil {
		opts.secrets = exchanger
	}
	s, rep, err := openStack(ctx, cfg, logger, opts)
	if err != nil {
		if c := client.Load(); c != nil {
			c.Close()
		}
		if metLis != nil {
			_ = metLis.Close()
		}
		return err
	}
	metricsDone := make(chan struct{})
	if m != nil {
		go func() {
			defer close(metricsDone)
			m.Serve(ctx, logger.Named("metrics"), metLis)
		}()
	} else {
		close(metricsDone)
	}
	logger.Info("bcd is running", "rerun", len(rep.Rerun), "interrupted", len(rep.Interrupted), "rebooted", len(rep.Rebooted), "not_rebooted", len(rep.NotRebooted))
	// SIGHUP (bcd reload, systemctl reload bcd) reloads the plugin
	// directory; the pid file tells bcd reload whom to signal.
	removePid, err := writePidFile(cfg.StateDir)
	if err != nil {
		logger.Warn("bcd reload will not find this process", "error", err)
	} else {
		defer removePid()
	}
	rl := &reloader{logger: logger.Named("reload"), flags: cf, s: s, stateDir: cfg.StateDir, rehello: func() {
		if c := client.Load(); c != nil {
			c.Rehello()
		}
	}}
	go rl.watch(ctx, hup)
	// Under systemd (Type=notify): READY once the plugins are loaded and the
	// journal settled, then WATCHDOG while the journal still answers, so a
	// wedged bcd is restarted rather than kept alive by a timer.
	if _, err := notify.Ready(); err != nil {
		logger.Warn("sd_notify READY failed", "error", err)
	}
	if _, err := notify.StartWatchdog(ctx, logger, func() error {
		_, err := s.j.Recent(1)
		return err
	}); err != nil {
		logger.Warn("systemd watchdog not started", "error", err)
	}
	sessionDone := make(chan struct{})
	if c := client.Load(); c != nil {
		logger.Info("connecting to the control plane", "address", cfg.ControlPlane)
		go func() {
			defer close(sessionDone)
			if err := c.Run(ctx); err != nil {
				logger.Error("session client stopped", "error", err)
			}
		}()
	} else {
		close(sessionDone)
		logger.Info("no control plane configured: serving local work only")
	}
	<-ctx.Done()
	if _, err := notify.Stopping(); err != nil {
		logger.Warn("sd_notify STOPPING failed", "error", err)
	}
	<-sessionDone
	<-metricsDone
	logger.Info("stopping: unfinished commands stay in the journal for the next start")
	s.close()
	if errors.Is(ctx.Err(), context.Canceled) {
		return nil
	}
	return ctx.Err()
}

// checkPluginDir refuses a pluginDir that is not a directory. Every kind is
// a plugin, so a daemon without its plugin directory would connect, report
// no kinds and refuse every command as UNSUPPORTED: a node that looks
// healthy and can do nothing. A typo in the path, or a package not
// installed, is better told at start.
func checkPluginDir(dir string) error {
	info, err := os.Stat(dir)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return fmt.Errorf("pluginDir %s: no such directory: every kind is a plugin there, so bcd would run none (set pluginDir or --plugins; the package installs them in /usr/lib/bcd/plugins)", dir)
	case err != nil:
		return fmt.Errorf("pluginDir %s: %w", dir, err)
	case !info.IsDir():
		return fmt.Errorf("pluginDir %s: not a directory", dir)
	}
	return nil
}
