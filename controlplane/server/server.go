package server

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"
	reflectionv1 "google.golang.org/grpc/reflection/grpc_reflection_v1"
	reflectionv1alpha "google.golang.org/grpc/reflection/grpc_reflection_v1alpha"

	"github.com/better-compute/commands/controlplane/commands/batches"
	"github.com/better-compute/commands/controlplane/commands/bundles"
	"github.com/better-compute/commands/controlplane/commands/fleetruns"
	"github.com/better-compute/commands/controlplane/commands/history"
	"github.com/better-compute/commands/controlplane/commands/kinds"
	"github.com/better-compute/commands/controlplane/commands/queue"
	"github.com/better-compute/commands/controlplane/commands/sweeper"
	"github.com/better-compute/commands/controlplane/fleet/nodehealth"
	"github.com/better-compute/commands/controlplane/front/api"
	"github.com/better-compute/commands/controlplane/front/gateway"
	"github.com/better-compute/commands/controlplane/front/join"
	"github.com/better-compute/commands/controlplane/internal/store"
	"github.com/better-compute/commands/controlplane/modules"
	"github.com/better-compute/commands/controlplane/modules/metal"
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
func New(ctx context.Context, cfg Config, reg *kinds.Registry, logger hclog.Logger) (*Server, error) {
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	authCfg, err := cfg.AuthConfig()
	if err != nil {
		return nil, err
	}
	authn, err := auth.New(authCfg)
	if err != nil {
		return nil, fmt.Errorf("auth: %w", err)
	}
	if reg == nil {
		// The built-ins, then the modules' kinds (the metal module's BMC,
		// site.httpProxy and diag.dcgm kinds).
		if reg, err = kinds.NewRegistry(append(kinds.FirstParty(), metal.Manifests()...)...); err != nil {
			return nil, fmt.Errorf("kind registry: %w", err)
		}
	}
	if cfg.KindsDir != "" {
		if err := reg.LoadDir(cfg.KindsDir); err != nil {
			return nil, fmt.Errorf("loading kinds from %s: %w", cfg.KindsDir, err)
		}
	}
	creds, err := tlsCredentials(cfg.TLS)
	if err != nil {
		return nil, err
	}
	httpTLS, err := httpTLSConfig(cfg.HTTPTLS)
	if err != nil {
		return nil, err
	}
	poolCfg, err := pgxpool.ParseConfig(cfg.DatabaseURL)
	if err != nil {
		return nil, fmt.Errorf("database url: %w", err)
	}
	// The pool bounds the API's concurrency on the database; an enqueue
	// holds a connection for three round trips, so a few per CPU keep the
	// database busy without queueing behind the pool.
	poolCfg.MaxConns = cfg.MaxConns
	if poolCfg.MaxConns <= 0 {
		poolCfg.MaxConns = int32(max(8, 4*runtime.GOMAXPROCS(0)))
	}
	// A new connection runs the gateway's statements once before it
	// serves anyone: a backend's first run of a statement costs far more
	// than the next (queue.Warm).
	poolCfg.AfterConnect = queue.WarmConn
	pool, err := store.OpenConfig(ctx, poolCfg, logger)
	if err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, logger: logger.Named("server"), pool: pool, authn: authn}
	s.metrics = newMetrics(pool)
	if err := s.startTracing(ctx, cfg); err != nil {
		pool.Close()
		return nil, err
	}
	// closeOnErr undoes what New did so far: a failed New leaves no
	// listener bound, no connection open and no span unflushed.
	closeOnErr := func(err error) (*Server, error) {
		for _, l := range []net.Listener{s.grpcLis, s.gwLis, s.httpLis} {
			if l != nil {
				_ = l.Close()
			}
		}
		pool.Close()
		if s.flushTraces != nil {
			fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			_ = s.flushTraces(fctx)
			cancel()
		}
		return nil, err
	}

	var (
		support *bundles.Bundles
		dir     *bundles.DirStore
		blob    bundles.BlobStore
	)
	if cfg.SupportBundles != nil {
		store, err := bundles.Open(*cfg.SupportBundles)
		if err != nil {
			return closeOnErr(err)
		}
		support = bundles.New(store, cfg.SupportBundles.EffectiveMaxBytes())
		blob = store
		dir, _ = store.(*bundles.DirStore)
		if dir != nil && cfg.HTTPListen == "" {
			return closeOnErr(errors.New("supportBundles with driver dir needs httpListen, which serves the uploads"))
		}
	}

	q := queue.New(reg, logger)
	q.RequireBatches(cfg.BatchQuorum)
	s.queue = q
	// Every process that settles commands (gateway, sweeper, API cancel)
	// moves a fleet run's target in the settling transaction.
	s.fleet = fleetruns.New(pool, q, fleetruns.Options{Quorum: s.Quorum, Logger: logger, Prepare: s.prepareRunCommand})
	q.AlsoOnSettle(fleetruns.SettleHook)
	q.AlsoOnSettle(nodehealth.SettleHook)
	s.support = support
	if err := cfg.ValidateComponents(); err != nil {
		return closeOnErr(err)
	}
	if err := s.startSigning(ctx, cfg); err != nil {
		return closeOnErr(err)
	}
	s.trust = trustbundle.NewSource(pool, 0)
	s.registerSigningMetric()
	s.warnUnsigned(ctx)
	if cfg.Secrets != nil {
		key, err := secrets.LoadKeyFile(cfg.Secrets.KeyFile)
		if err != nil {
			return closeOnErr(err)
		}
		s.secrets = &secrets.PGStore{Pool: pool, Key: key}
		s.logger.Info("secrets on", "key_id", key.ID)
	}
	if cfg.Gateway.Listen != "" && cfg.Runs(ComponentGateway) {
		if err := s.newGateway(cfg.Gateway); err != nil {
			return closeOnErr(err)
		}
	}
	s.nodeWakers, s.workflowWakers = &sweeper.Wakers{}, &sweeper.Wakers{}
	if !cfg.Sweeper.Disabled && cfg.Runs(ComponentSweeper) {
		s.sweeper = sweeper.New(pool, q, sweeper.Options{Interval: time.Duration(cfg.Sweeper.Interval),
			Nodes: s.nodeWakers, Workflows: s.workflowWakers, Logger: logger, OnSwept: s.metrics.ops.onSwept})
		// The fleet runs' advancer is a singleton like the sweeper, and
		// runs where it runs.
		s.advancer = fleetruns.NewAdvancer(s.fleet, fleetruns.AdvancerOptions{})
	}
	if err := s.newHistory(ctx, cfg, blob); err != nil {
		return closeOnErr(err)
	}
	if err := s.startModules(cfg, reg); err != nil {
		return closeOnErr(err)
	}
	s.logKinds("start")
	s.api = api.New(api.Config{Pool: pool, Queue: q, Logger: logger, Allowlist: cfg.Allowlist, Quorum: s.Quorum,
		Bundles: support, Join: s.join, MaxWatchesPerIdentity: cfg.MaxWatchesPerIdentity, Tracer: s.tracer, Secrets: s.secretStore(),
		FleetRuns: s.fleet})
	if s.gateway != nil {
		registerGateway(s.metrics.reg, s.gateway)
	}
	if s.sweeper != nil {
		registerSweeper(s.metrics.reg, s.sweeper)
	}

	authn.AllowUnauthenticated(healthpb.Health_ServiceDesc.ServiceName,
		reflectionv1.ServerReflection_ServiceDesc.ServiceName, reflectionv1alpha.ServerReflection_ServiceDesc.ServiceName)
	decode := newDecodeChecks()
	opts := []grpc.ServerOption{
		grpc.ForceServerCodecV2(decode.serverCodec()),
		grpc.ChainUnaryInterceptor(s.metrics.unary(), decode.unary(), authn.UnaryInterceptor()),
		grpc.ChainStreamInterceptor(s.metrics.stream(), decode.stream(), authn.StreamInterceptor()),
	}
	if creds != nil {
		opts = append(opts, grpc.Creds(creds))
	} else {
		s.logger.Warn("the API serves plaintext: set tls.cert and tls.key outside loopback and tests")
	}
	s.grpc = grpc.NewServer(opts...)
	if cfg.Runs(ComponentAPI) {
		s.api.Register(s.grpc)
		// The metal module's workflows (metal.power, metal.bulk).
		(&metal.Service{Pool: pool, Queue: q, Quorum: s.Quorum, Logger: logger.Named("metal")}).Register(s.grpc)
	}
	s.health = health.NewServer()
	healthpb.RegisterHealthServer(s.grpc, s.health)
	// Reflection lets grpcurl, Postman and any language's tooling use the
	// API without our CLI or the .proto files.
	reflection.Register(s.grpc)

	if s.grpcLis, err = net.Listen("tcp", cfg.GRPCListen); err != nil {
		return closeOnErr(fmt.Errorf("listening for gRPC on %s: %w", cfg.GRPCListen, err))
	}
	if cfg.HTTPListen != "" {
		if s.httpLis, err = net.Listen("tcp", cfg.HTTPListen); err != nil {
			return closeOnErr(fmt.Errorf("listening for HTTP on %s: %w", cfg.HTTPListen, err))
		}
		if httpTLS != nil {
			s.httpLis = tls.NewListener(s.httpLis, httpTLS)
		}
		mux := http.NewServeMux()
		mux.HandleFunc("/healthz", s.healthz)
		mux.HandleFunc("/readyz", s.readyz)
		mux.Handle("/metrics", promhttp.HandlerFor(s.metrics.reg, promhttp.HandlerOpts{}))
		if dir != nil {
			mux.Handle(dir.MountPath()+"/", dir.Handler())
		}
		if cfg.Runs(ComponentAPI) {
			// Support bundles for a caller with the node's read permission
			// (the console's download link): the API's token, no store
			// credentials.
			mux.Handle(api.BundlePath, s.api.BundleHandler(authn))
		}
		if cfg.Runs(ComponentAPI) && !cfg.Browser.Disabled {
			if err := s.mountBrowser(mux, cfg.Browser, httpTLS != nil); err != nil {
				return closeOnErr(err)
			}
		}
		s.http = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	}
	return s, nil
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
		Secrets: s.exchanger(),
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

// GatewayAddr is the gateway's bound address, nil when off.
func (s *Server) GatewayAddr() net.Addr {
	if s.gwLis == nil {
		return nil
	}
	return s.gwLis.Addr()
}

// CA is the node CA, nil when the gateway is off.
func (s *Server) CA() *pki.CA { return s.ca }

// Gateway is the node session server, nil when off.
func (s *Server) Gateway() *gateway.Gateway { return s.gateway }

// Join is the join service, nil when the gateway is off.
func (s *Server) Join() *join.Service { return s.join }

// Sweeper is the CommandSweeper, nil when disabled.
func (s *Server) Sweeper() *sweeper.Sweeper { return s.sweeper }

// NodeWakers are woken with a node id when the sweeper settles one of its
// commands; node controllers register here.
func (s *Server) NodeWakers() *sweeper.Wakers { return s.nodeWakers }

// WorkflowWakers are woken with a workflow id when the sweeper settles a
// command whose key is wf:<workflowId>:…; workflow engines register here.
func (s *Server) WorkflowWakers() *sweeper.Wakers { return s.workflowWakers }

// Queue is the server's command queue.
func (s *Server) Queue() *queue.Queue { return s.queue }

// GRPCAddr is the API's bound address.
func (s *Server) GRPCAddr() net.Addr { return s.grpcLis.Addr() }

// HTTPAddr is the health and metrics address, nil when off.
func (s *Server) HTTPAddr() net.Addr {
	if s.httpLis == nil {
		return nil
	}
	return s.httpLis.Addr()
}

// Pool is the server's database pool.
func (s *Server) Pool() *pgxpool.Pool { return s.pool }

// healthz says the process is alive.
func (s *Server) healthz(w http.ResponseWriter, _ *http.Request) {
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write([]byte("ok\n"))
}

// readyz says the server takes traffic: not stopping, and the database
// answers. A second line says whether commands are signed (signingState):
// unsigned is not unready, but an operator looking should see it.
func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	if s.stopping.Load() {
		http.Error(w, "shutting down", http.StatusServiceUnavailable)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	if err := s.pool.Ping(ctx); err != nil {
		http.Error(w, "database: "+err.Error(), http.StatusServiceUnavailable)
		return
	}
	_, _ = w.Write([]byte("ready\n"))
	s.writeSigningDetail(ctx, w)
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

// httpTLSConfig is the HTTP listener's TLS; nil without a certificate,
// when it serves plain HTTP.
func httpTLSConfig(t HTTPTLSConfig) (*tls.Config, error) {
	if t.Cert == "" && t.Key == "" {
		return nil, nil
	}
	if t.Cert == "" || t.Key == "" {
		return nil, errors.New("httpTls needs both cert and key")
	}
	pair, err := tls.LoadX509KeyPair(t.Cert, t.Key)
	if err != nil {
		return nil, fmt.Errorf("httpTls: loading the certificate: %w", err)
	}
	return &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}, nil
}

// tlsCredentials builds the API's TLS; nil without a certificate.
func tlsCredentials(t TLSConfig) (credentials.TransportCredentials, error) {
	if t.Cert == "" && t.Key == "" {
		if t.ClientCA != "" {
			return nil, errors.New("tls.clientCa needs tls.cert and tls.key")
		}
		return nil, nil
	}
	pair, err := tls.LoadX509KeyPair(t.Cert, t.Key)
	if err != nil {
		return nil, fmt.Errorf("loading the server certificate: %w", err)
	}
	cfg := &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}
	if t.ClientCA != "" {
		pem, err := os.ReadFile(t.ClientCA)
		if err != nil {
			return nil, fmt.Errorf("reading the client CA: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("client CA %s holds no PEM certificate", t.ClientCA)
		}
		cfg.ClientCAs = pool
		// Verify a certificate when one is sent; a client without one may
		// still authenticate with a bearer token.
		cfg.ClientAuth = tls.VerifyClientCertIfGiven
	}
	return credentials.NewTLS(cfg), nil
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
