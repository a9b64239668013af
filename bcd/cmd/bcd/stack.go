package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/hashicorp/go-hclog"
	"go.opentelemetry.io/otel/trace"

	"github.com/better-compute/commands/bcd/config"
	"github.com/better-compute/commands/bcd/daemon"
	"github.com/better-compute/commands/bcd/journal"
	"github.com/better-compute/commands/bcd/metrics"
	"github.com/better-compute/commands/bcd/pluginhost"
	"github.com/better-compute/commands/internal/version"
	"github.com/better-compute/commands/sdk/kind"
)

// localNodeID names the node for local runs without a configured node id.
const localNodeID = "node_local"

func newLogger(cfg config.Config, out io.Writer) hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{
		Name:       "bcd",
		Level:      hclog.LevelFromString(cfg.LogLevel),
		Output:     out,
		JSONFormat: cfg.LogJSON,
	})
}

// stack is bcd assembled: journal, node state, plugin host and daemon.
type stack struct {
	logger hclog.Logger
	cfg    config.Config
	j      *journal.Journal
	state  *daemon.State
	host   *pluginhost.Host
	d      *daemon.Daemon
}

func hostConfig(cfg config.Config, m *metrics.Metrics) pluginhost.Config {
	hc := pluginhost.Config{
		Dir:          cfg.PluginDir,
		SHA256:       cfg.PluginSHA256,
		Env:          cfg.PluginEnvironment(),
		StartTimeout: cfg.PluginStartTimeout.D(),
		LogLevel:     cfg.LogLevel,
	}
	if m != nil {
		hc.OnEvent = m.OnPluginEvent
	}
	return hc
}

// startPlugins starts the plugin host. Refused plugins are logged and the
// others serve: one bad vendor binary must not take the node's kinds down.
func startPlugins(ctx context.Context, logger hclog.Logger, cfg config.Config, services *daemon.State, m *metrics.Metrics) *pluginhost.Host {
	host := pluginhost.New(logger, hostConfig(cfg, m), svcOrNil(services))
	if err := host.Start(ctx); err != nil {
		logger.Error("some plugins did not load", "error", err)
	}
	rememberPluginKinds(logger, cfg.StateDir, host)
	return host
}

// svcOrNil keeps a nil *State from becoming a non-nil kind.Host.
func svcOrNil(s *daemon.State) kind.Host {
	if s == nil {
		return nil
	}
	return s
}

func readBootID(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("reading the boot id from %s: %w", path, err)
	}
	return strings.TrimSpace(string(b)), nil
}

// stackOptions are what `bcd run` adds to the stack for its session.
type stackOptions struct {
	// secrets exchanges commands' secretRefs over the session; nil when
	// bcd has no control plane.
	secrets daemon.SecretSource
	// allowed are the kinds a restricted node certificate allows.
	allowed []string
	// trust is checks 4 and 5, the clock and the node key; nil for a local
	// bcd exec, which takes its command from the operator, not a gateway.
	trust *nodeTrust
	// onSpec asks the control plane for a newer node spec.
	onSpec func(haveGeneration int64)
	// beforeRecover runs once the daemon exists, before Recover settles the
	// journal: the session client subscribes there, so the outcomes of
	// Recover's reruns reach it.
	beforeRecover func(*stack)
	// metrics, when set, are fed by the journal, plugin host, daemon and
	// lanes (metricsListen).
	metrics *metrics.Metrics
	// tracer records the commands' spans (tracing.otlpEndpoint); nil: none.
	tracer trace.Tracer
	// handoff settles daemon.upgrade after a restart; nil: none.
	handoff daemon.Handoff
}

// openStack opens everything and recovers the journal.
func openStack(ctx context.Context, cfg config.Config, logger hclog.Logger, opts stackOptions) (*stack, daemon.RecoverReport, error) {
	var rep daemon.RecoverReport
	boot, err := readBootID(cfg.BootIDFile)
	if err != nil {
		return nil, rep, err
	}
	jopts := journal.Options{ReplayHorizon: cfg.ReplayHorizon.D()}
	if opts.metrics != nil {
		jopts.OnCommit = opts.metrics.OnCommit
	}
	j, err := journal.Open(logger, cfg.StateDir, jopts)
	if err != nil {
		return nil, rep, err
	}
	state, err := daemon.NewState(cfg.StateDir, j)
	if err != nil {
		_ = j.Close()
		return nil, rep, err
	}
	host := startPlugins(ctx, logger, cfg, state, opts.metrics)
	dcfg := daemon.Config{NodeID: cfg.NodeID, Role: cfg.Role, BootID: boot, Lanes: cfg.Lanes,
		AllowedKinds: opts.allowed, OnSpecRequest: opts.onSpec, Tracer: opts.tracer, Handoff: opts.handoff,
		Secrets: opts.secrets}
	if opts.metrics != nil {
		dcfg.OnState = opts.metrics.OnState
	}
	if opts.trust != nil {
		dcfg.Trust, dcfg.Batches, dcfg.Clock, dcfg.NodeKey = opts.trust.verifier, opts.trust.batches, opts.trust.clock, opts.trust.key
	}
	d, err := daemon.New(logger, dcfg, j, state, host)
	if err != nil {
		_ = host.Close()
		_ = j.Close()
		return nil, rep, err
	}
	s := &stack{logger: logger, cfg: cfg, j: j, state: state, host: host, d: d}
	if opts.metrics != nil {
		opts.metrics.Lanes(d.Lanes())
	}
	logger.Info("bcd started", "version", version.Version, "node_id", cfg.NodeID, "journal_id", j.ID(), "boot_id", boot, "kinds", len(host.Manifests()))
	if opts.beforeRecover != nil {
		opts.beforeRecover(s)
	}
	rep, err = d.Recover(ctx)
	if err != nil {
		s.close()
		return nil, rep, err
	}
	return s, rep, nil
}

func (s *stack) close() {
	if err := s.d.Close(); err != nil {
		s.logger.Error("closing the daemon", "error", err)
	}
	if err := s.host.Close(); err != nil {
		s.logger.Error("closing the plugin host", "error", err)
	}
	if err := s.j.Close(); err != nil {
		s.logger.Error("closing the journal", "error", err)
	}
}
