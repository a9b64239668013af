package server

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/better-compute/commands/controlplane/commands/batches"
	"github.com/better-compute/commands/controlplane/commands/bundles"
	"github.com/better-compute/commands/controlplane/commands/fleetruns"
	"github.com/better-compute/commands/controlplane/commands/history"
	"github.com/better-compute/commands/controlplane/commands/kinds"
	"github.com/better-compute/commands/controlplane/commands/queue"
	"github.com/better-compute/commands/controlplane/commands/sweeper"
	"github.com/better-compute/commands/controlplane/front/api"
	"github.com/better-compute/commands/controlplane/front/gateway"
	"github.com/better-compute/commands/controlplane/front/join"
	"github.com/better-compute/commands/controlplane/modules"
	"github.com/better-compute/commands/controlplane/trust/auth"
	"github.com/better-compute/commands/controlplane/trust/pki"
	"github.com/better-compute/commands/controlplane/trust/secrets"
	"github.com/better-compute/commands/controlplane/trust/signing"
	"github.com/better-compute/commands/controlplane/trust/trustbundle"
	"github.com/better-compute/commands/internal/sessiongrpc"
	"github.com/better-compute/commands/internal/tracing"
	"github.com/better-compute/commands/internal/version"
	agentv1 "github.com/better-compute/commands/proto/bc/agent/v1"
)

// Server is a running control plane API server.
type Server struct {
	// secrets is the secret store (cfg.Secrets), nil without one.
	secrets  *secrets.PGStore
	cfg      Config
	logger   hclog.Logger
	pool     *pgxpool.Pool
	grpc     *grpc.Server
	health   *health.Server
	http     *http.Server
	grpcLis  net.Listener
	httpLis  net.Listener
	api      *api.Server
	metrics  *metrics
	authn    *auth.Authenticator
	stopping atomic.Bool
	queue    *queue.Queue
	// support is nil without supportBundles.
	support *bundles.Bundles
	// signer is the command-signing authority, nil without
	// pki.commandSigning (or in a process without the api component); trust
	// hands out the newest published trust bundle.
	signer atomic.Pointer[signing.Authority]
	quorum atomic.Pointer[batches.Quorum]
	trust  *trustbundle.Source

	// The gateway's parts; nil when cfg.Gateway.Listen is empty.
	ca       *pki.CA
	gateway  *gateway.Gateway
	join     *join.Service
	gwGRPC   *grpc.Server
	gwLis    net.Listener
	sessions *nodeSessions

	// sweeper is nil when cfg.Sweeper.Disabled; nodeWakers and
	// workflowWakers are what it wakes when it settles a command.
	sweeper *sweeper.Sweeper
	// history is the history archiver; nil when retention is off or this
	// process does not run the sweeper component.
	history *history.Runner
	// fleet holds the fleet runs; advancer advances them where the
	// sweeper runs.
	fleet                      *fleetruns.Service
	advancer                   *fleetruns.Advancer
	nodeWakers, workflowWakers *sweeper.Wakers

	// modules is the module host: its settle hook records owner wakes in
	// every process; its loops and River run with the modules component.
	modules *modules.Host

	// tracer records the commands' spans; flushTraces ends its exporter.
	tracer      trace.Tracer
	flushTraces func(context.Context) error
}

// New opens the database (applying migrations), builds the registry from the
// first-party manifests and KindsDir, and binds both listeners, so a bad
// address or database fails here rather than after start.
//
// It runs as a sequence of steps (newSteps, in order); each step that opens
// something (the pool, the tracer, a listener) pushes its closer, and a step
// that fails runs the closers pushed so far, newest first: a failed New
// leaves no listener bound, no connection open and no span unflushed.
func New(ctx context.Context, cfg Config, reg *kinds.Registry, logger hclog.Logger) (*Server, error) {
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	b := &builder{cfg: cfg, reg: reg, logger: logger, s: &Server{cfg: cfg, logger: logger.Named("server")}}
	for _, step := range b.steps() {
		if err := step.run(ctx); err != nil {
			b.logger.Debug("building the server failed; closing what it opened", "step", step.name, "error", err)
			b.closeAll(ctx)
			return nil, err
		}
	}
	return b.s, nil
}

// ReloadAuth replaces the identities and grants with those of cfg (its auth
// section or authFile): bc-server calls it on SIGHUP. A bad config changes
// nothing and is returned.
func (s *Server) ReloadAuth(cfg Config) error {
	ac, err := cfg.AuthConfig()
	if err != nil {
		return err
	}
	if err := s.authn.Reload(ac); err != nil {
		return fmt.Errorf("auth: %w", err)
	}
	s.logger.Info("identities reloaded", "identities", len(ac.Identities))
	return nil
}

// newGateway loads (or creates) the node CA, issues the gateway's serving
// certificate and binds the node-facing listener. Its TLS asks for a client
// certificate but verifies one only when given (against the node CA), so
// Join works for a node without a certificate while Session refuses any
// stream without a verified node certificate.
func (s *Server) newGateway(gc GatewayConfig) error {
	if gc.CADir == "" {
		return errors.New("gateway.caDir is required with gateway.listen: it holds the node CA")
	}
	shedEvery, shedAbove, err := gc.Shed.Options()
	if err != nil {
		return err
	}
	ca, err := pki.LoadOrCreateCA(gc.CADir)
	if err != nil {
		return fmt.Errorf("node CA in %s: %w", gc.CADir, err)
	}
	hosts := gc.ServerHosts
	if len(hosts) == 0 {
		hosts = []string{"localhost", "127.0.0.1"}
	}
	certPEM, keyPEM, err := ca.IssueServer(hosts...)
	if err != nil {
		return fmt.Errorf("gateway certificate: %w", err)
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return fmt.Errorf("gateway certificate: %w", err)
	}
	s.ca = ca
	s.gateway = gateway.New(s.pool, s.queue, s.logger, gateway.Options{
		Poll: time.Duration(gc.Poll), CancelResend: time.Duration(gc.CancelResend),
		BusyBackoffMin: time.Duration(gc.BusyBackoffMin), BusyBackoffMax: time.Duration(gc.BusyBackoffMax),
		OnSettled: s.checkBundle, TrustBundle: s.trust, NodeCA: ca.Pool(), Observer: s.metrics.ops, Tracer: s.tracer,
		Secrets: s.exchanger(), Name: gc.Name,
		Shed: gateway.ShedOptions{Off: gc.Shed.Off, Every: shedEvery, Above: shedAbove, Least: gc.Shed.Least, Most: gc.Shed.Most},
	})
	s.join = join.New(s.pool, s.queue, ca, s.trust, s.logger)
	s.sessions = newNodeSessions(s.pool, s.queue, s.logger)
	s.gwGRPC = grpc.NewServer(append([]grpc.ServerOption{grpc.Creds(credentials.NewTLS(&tls.Config{
		Certificates: []tls.Certificate{pair}, ClientCAs: ca.Pool(),
		ClientAuth: tls.VerifyClientCertIfGiven, MinVersion: tls.VersionTLS12,
	})), grpc.ChainStreamInterceptor(s.sessions.interceptor()),
		// Stop returns only once every session's handler did: nothing of a
		// session touches the pool after Run closes it.
		grpc.WaitForHandlers(true)}, sessiongrpc.ServerOptions()...)...)
	agentv1.RegisterSessionServer(s.gwGRPC, s.gateway)
	agentv1.RegisterJoinServer(s.gwGRPC, s.join)
	if s.gwLis, err = net.Listen("tcp", gc.Listen); err != nil {
		return fmt.Errorf("listening for the gateway on %s: %w", gc.Listen, err)
	}
	return nil
}

// exchanger is the gateway's secret exchange, nil without secrets.
func (s *Server) exchanger() gateway.SecretExchanger {
	if s.secrets == nil {
		return nil
	}
	return &secrets.Exchanger{Pool: s.pool, Store: s.secrets, Logger: s.logger.Named("secrets")}
}

// secretStore is the API's secret store, nil (no service) without secrets.
func (s *Server) secretStore() secrets.Store {
	if s.secrets == nil {
		return nil
	}
	return s.secrets
}

// Run serves until ctx ends, then stops gracefully: readiness and gRPC
// health turn NOT_SERVING, watches end with UNAVAILABLE (clients resume on
// another replica with their cursor), unary calls in flight finish within
// ShutdownTimeout, and the pool closes last.
func (s *Server) Run(ctx context.Context) error {
	apiCtx, stopAPI := context.WithCancel(context.Background())
	defer stopAPI()
	s.api.Start(apiCtx)
	s.health.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)

	// Every goroutine Run starts is waited for before the pool closes:
	// the background workers (bg) once the API's context ends, the
	// listeners (serving) once their servers stopped.
	errc := make(chan error, 3)
	var bg errgroup.Group
	var serving sync.WaitGroup
	serving.Go(func() { errc <- s.grpc.Serve(s.grpcLis) })
	if s.sweeper != nil {
		bg.Go(func() error { s.sweeper.Run(apiCtx); return nil })
	}
	if s.history != nil {
		bg.Go(func() error { s.history.Run(apiCtx); return nil })
	}
	if s.advancer != nil {
		bg.Go(func() error { s.advancer.Run(apiCtx); return nil })
	}
	modulesDone := s.runModules(apiCtx)
	if s.gwGRPC != nil {
		bg.Go(func() error { s.gateway.Run(apiCtx); return nil })
		bg.Go(func() error { s.sessions.run(apiCtx); return nil })
		bg.Go(func() error { s.sessions.touch(apiCtx, s.pool); return nil })
		serving.Go(func() { errc <- s.gwGRPC.Serve(s.gwLis) })
	}
	if s.http != nil {
		serving.Go(func() {
			if err := s.http.Serve(s.httpLis); !errors.Is(err, http.ErrServerClosed) {
				errc <- err
			}
		})
	}
	s.logger.Info("serving", "grpc", s.GRPCAddr().String(), "http", fmt.Sprint(s.HTTPAddr()), "gateway", fmt.Sprint(s.GatewayAddr()),
		"http_tls", s.cfg.HTTPTLS.Cert != "")

	var runErr error
	select {
	case <-ctx.Done():
	case runErr = <-errc:
		s.logger.Error("listener failed; stopping", "error", runErr)
	}

	s.stopping.Store(true)
	s.health.Shutdown()
	if s.gwGRPC != nil {
		// A session never ends on its own, so waiting for it would only
		// run out the timeout: close them now. Nodes reconnect with backoff
		// (to another replica) and replay; their commands stay in PostgreSQL.
		s.gwGRPC.Stop()
	}
	stopAPI()
	timeout := time.Duration(s.cfg.ShutdownTimeout)
	if timeout <= 0 {
		timeout = DefaultShutdownTimeout
	}
	stopped := make(chan struct{})
	go func() {
		s.grpc.GracefulStop()
		close(stopped)
	}()
	timer := time.NewTimer(timeout)
	select {
	case <-stopped:
		timer.Stop()
	case <-timer.C:
		s.logger.Warn("graceful stop timed out; closing connections", "timeout", timeout)
		s.grpc.Stop()
		<-stopped
	}
	// The sweeper resigns its lease before the pool closes, so another
	// replica takes over at once.
	_ = bg.Wait() // the workers return no error: they log their own
	<-modulesDone
	if s.http != nil {
		hctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = s.http.Shutdown(hctx)
		cancel()
	}
	serving.Wait()
	s.api.Wait()
	s.pool.Close()
	fctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	if err := s.flushTraces(fctx); err != nil {
		s.logger.Warn("flushing traces", "error", err)
	}
	cancel()
	s.logger.Info("stopped")
	return runErr
}

// checkBundle holds a settled logs.collect to what the blob store has: the
// object must be within the cap and match the SHA-256 the node reported, or
// it is deleted (S3 cannot cap a presigned PUT, so this is where the cap
// holds there). A mismatch is logged; the command's outcome is the node's.
func (s *Server) checkBundle(ctx context.Context, c queue.Command) {
	if s.support == nil || c.BundleKey == "" || c.State != queue.Succeeded {
		return
	}
	var r struct {
		SHA256 string `json:"sha256"`
	}
	if err := json.Unmarshal(c.Result, &r); err != nil || r.SHA256 == "" {
		s.logger.Warn("logs.collect result names no sha256; bundle not checked", "command_id", c.ID, "bundle_key", c.BundleKey)
		return
	}
	if _, err := s.support.Check(ctx, c.BundleKey, r.SHA256); err != nil {
		s.logger.Error("support bundle refused after upload", "command_id", c.ID, "bundle_key", c.BundleKey, "error", err)
		return
	}
	s.logger.Info("support bundle stored", "command_id", c.ID, "bundle_key", c.BundleKey)
}

// startTracing sets the server's tracer: cfg.TracerProvider when given
// (tests), else tracing.otlpEndpoint's exporter, else none.
func (s *Server) startTracing(ctx context.Context, cfg Config) error {
	tp := cfg.TracerProvider
	s.flushTraces = func(context.Context) error { return nil }
	if tp == nil {
		p, err := tracing.New(ctx, "bc-server", version.Version, tracing.Config{OTLPEndpoint: cfg.Tracing.OTLPEndpoint})
		if err != nil {
			return err
		}
		tp, s.flushTraces = p, p.Shutdown
		if cfg.Tracing.OTLPEndpoint != "" {
			s.logger.Info("exporting traces", "otlp_endpoint", cfg.Tracing.OTLPEndpoint)
		}
	}
	s.tracer = tp.Tracer("github.com/better-compute/commands/controlplane")
	return nil
}

// prepareRunCommand completes a fleet run's command on one node before it
// is queued: a logs.collect gets its own presigned upload, as commands.run
// gives one, under a key named after the run and the node.
func (s *Server) prepareRunCommand(ctx context.Context, p *queue.EnqueueParams) error {
	if p.Kind != "logs.collect" {
		return nil
	}
	if s.support == nil {
		return bundles.ErrNoDestination
	}
	key, fields, err := s.support.Presign(ctx, p.NodeID, strings.ReplaceAll(p.IdempotencyKey, ":", "-"), p.NotAfter)
	if err != nil {
		return err
	}
	merged, err := bundles.MergePayload(p.Payload, key, fields)
	if err != nil {
		return err
	}
	p.Payload, p.BundleKey = merged, key
	return nil
}
