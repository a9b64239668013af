package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"runtime"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"
	reflectionv1 "google.golang.org/grpc/reflection/grpc_reflection_v1"
	reflectionv1alpha "google.golang.org/grpc/reflection/grpc_reflection_v1alpha"

	"github.com/better-compute/commands/controlplane/commands/bundles"
	"github.com/better-compute/commands/controlplane/commands/fleetruns"
	"github.com/better-compute/commands/controlplane/commands/kinds"
	"github.com/better-compute/commands/controlplane/commands/queue"
	"github.com/better-compute/commands/controlplane/commands/sweeper"
	"github.com/better-compute/commands/controlplane/fleet/nodehealth"
	"github.com/better-compute/commands/controlplane/front/api"
	"github.com/better-compute/commands/controlplane/internal/store"
	"github.com/better-compute/commands/controlplane/modules/metal"
	"github.com/better-compute/commands/controlplane/trust/auth"
	"github.com/better-compute/commands/controlplane/trust/secrets"
	"github.com/better-compute/commands/controlplane/trust/trustbundle"
)

// builder carries what New's steps hand each other before the Server is
// whole, and the stack of closers of what they opened.
type builder struct {
	cfg    Config
	reg    *kinds.Registry
	logger hclog.Logger
	s      *Server

	creds   credentials.TransportCredentials
	httpTLS *tls.Config
	// The support-bundle store: blob is nil without supportBundles, dir
	// when its driver is dir.
	blob bundles.BlobStore
	dir  *bundles.DirStore

	closers []func(ctx context.Context)
}

// step is one of New's steps.
type step struct {
	name string
	run  func(ctx context.Context) error
}

// steps are New's steps in order. Configuration is checked before anything
// is opened; the database before what uses it; the listeners last, so a
// server that could not be built never accepted a connection.
func (b *builder) steps() []step {
	return []step{
		{"auth", b.auth},
		{"kinds", b.kinds},
		{"tls", b.tls},
		{"database", b.database},
		{"tracing", b.tracing},
		{"support bundles", b.supportBundles},
		{"queue", b.queue},
		{"signing", b.signing},
		{"signing metric", noCtx(func() error { b.s.registerSigningMetric(); return nil })},
		{"secrets", b.secrets},
		{"gateway", noCtx(b.gateway)},
		{"sweeper", b.sweeper},
		{"history", func(ctx context.Context) error { return b.s.newHistory(ctx, b.cfg, b.blob) }},
		{"modules", func(context.Context) error { return b.s.startModules(b.cfg, b.reg) }},
		{"api", b.api},
		{"grpc", noCtx(b.grpcServer)},
		{"listeners", b.listeners},
		{"http", b.httpServer},
	}
}

// noCtx is a step that needs no context: what it builds (the gateway's and
// the API's gRPC servers, a metric read at scrape time) takes each call's
// own context later, not New's.
func noCtx(f func() error) func(context.Context) error {
	return func(context.Context) error { return f() }
}

// push adds a closer; closeAll runs them newest first.
func (b *builder) push(f func(ctx context.Context)) { b.closers = append(b.closers, f) }

func (b *builder) closeAll(ctx context.Context) {
	for i := len(b.closers) - 1; i >= 0; i-- {
		b.closers[i](ctx)
	}
	b.closers = nil
}

// closeListener pushes the closer of the listener *l holds once bound.
func (b *builder) closeListener(l *net.Listener) {
	b.push(func(context.Context) {
		if *l != nil {
			_ = (*l).Close()
		}
	})
}

func (b *builder) auth(context.Context) error {
	authCfg, err := b.cfg.AuthConfig()
	if err != nil {
		return err
	}
	if b.s.authn, err = auth.New(authCfg); err != nil {
		return fmt.Errorf("auth: %w", err)
	}
	return nil
}

func (b *builder) kinds(context.Context) error {
	if b.reg == nil {
		// The built-ins, then the modules' kinds (the metal module's BMC,
		// site.httpProxy and diag.dcgm kinds).
		reg, err := kinds.NewRegistry(append(kinds.FirstParty(), metal.Manifests()...)...)
		if err != nil {
			return fmt.Errorf("kind registry: %w", err)
		}
		b.reg = reg
	}
	if b.cfg.KindsDir != "" {
		if err := b.reg.LoadDir(b.cfg.KindsDir); err != nil {
			return fmt.Errorf("loading kinds from %s: %w", b.cfg.KindsDir, err)
		}
	}
	return nil
}

func (b *builder) tls(context.Context) error {
	var err error
	if b.creds, err = tlsCredentials(b.cfg.TLS); err != nil {
		return err
	}
	b.httpTLS, err = httpTLSConfig(b.cfg.HTTPTLS)
	return err
}

func (b *builder) database(ctx context.Context) error {
	poolCfg, err := pgxpool.ParseConfig(b.cfg.DatabaseURL)
	if err != nil {
		return fmt.Errorf("database url: %w", err)
	}
	// The pool bounds the API's concurrency on the database; an enqueue
	// holds a connection for three round trips, so a few per CPU keep the
	// database busy without queueing behind the pool.
	poolCfg.MaxConns = b.cfg.MaxConns
	if poolCfg.MaxConns <= 0 {
		poolCfg.MaxConns = int32(max(8, 4*runtime.GOMAXPROCS(0)))
	}
	// A new connection runs the gateway's statements once before it
	// serves anyone: a backend's first run of a statement costs far more
	// than the next (queue.Warm).
	poolCfg.AfterConnect = queue.WarmConn
	pool, err := store.OpenConfig(ctx, poolCfg, b.logger)
	if err != nil {
		return err
	}
	b.push(func(context.Context) { pool.Close() })
	b.s.pool = pool
	b.s.metrics = newMetrics(pool)
	return nil
}

func (b *builder) tracing(ctx context.Context) error {
	if err := b.s.startTracing(ctx, b.cfg); err != nil {
		return err
	}
	b.push(func(ctx context.Context) {
		if b.s.flushTraces != nil {
			fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			_ = b.s.flushTraces(fctx)
			cancel()
		}
	})
	return nil
}

func (b *builder) supportBundles(context.Context) error {
	if b.cfg.SupportBundles == nil {
		return nil
	}
	st, err := bundles.Open(*b.cfg.SupportBundles)
	if err != nil {
		return err
	}
	b.s.support = bundles.New(st, b.cfg.SupportBundles.EffectiveMaxBytes())
	b.blob = st
	b.dir, _ = st.(*bundles.DirStore)
	if b.dir != nil && b.cfg.HTTPListen == "" {
		return errors.New("supportBundles with driver dir needs httpListen, which serves the uploads")
	}
	return nil
}

func (b *builder) queue(context.Context) error {
	q := queue.New(b.reg, b.logger)
	q.RequireBatches(b.cfg.BatchQuorum)
	b.s.queue = q
	// Every process that settles commands (gateway, sweeper, API cancel)
	// moves a fleet run's target in the settling transaction.
	b.s.fleet = fleetruns.New(b.s.pool, q, fleetruns.Options{Quorum: b.s.Quorum, Logger: b.logger, Prepare: b.s.prepareRunCommand})
	q.AlsoOnSettle(fleetruns.SettleHook)
	q.AlsoOnSettle(nodehealth.SettleHook)
	return b.cfg.ValidateComponents()
}

func (b *builder) signing(ctx context.Context) error {
	if err := b.s.startSigning(ctx, b.cfg); err != nil {
		return err
	}
	b.s.trust = trustbundle.NewSource(b.s.pool, 0)
	b.s.warnUnsigned(ctx)
	return nil
}

func (b *builder) secrets(context.Context) error {
	if b.cfg.Secrets == nil {
		return nil
	}
	key, err := secrets.LoadKeyFile(b.cfg.Secrets.KeyFile)
	if err != nil {
		return err
	}
	b.s.secrets = &secrets.PGStore{Pool: b.s.pool, Key: key}
	b.s.logger.Info("secrets on", "key_id", key.ID)
	return nil
}

func (b *builder) gateway() error {
	if b.cfg.Gateway.Listen == "" || !b.cfg.Runs(ComponentGateway) {
		return nil
	}
	b.closeListener(&b.s.gwLis)
	return b.s.newGateway(b.cfg.Gateway)
}

func (b *builder) sweeper(context.Context) error {
	s := b.s
	s.nodeWakers, s.workflowWakers = &sweeper.Wakers{}, &sweeper.Wakers{}
	if b.cfg.Sweeper.Disabled || !b.cfg.Runs(ComponentSweeper) {
		return nil
	}
	s.sweeper = sweeper.New(s.pool, s.queue, sweeper.Options{Interval: time.Duration(b.cfg.Sweeper.Interval),
		Nodes: s.nodeWakers, Workflows: s.workflowWakers, Logger: b.logger, OnSwept: s.metrics.ops.onSwept})
	// The fleet runs' advancer is a singleton like the sweeper, and runs
	// where it runs.
	s.advancer = fleetruns.NewAdvancer(s.fleet, fleetruns.AdvancerOptions{})
	return nil
}

func (b *builder) api(context.Context) error {
	s := b.s
	s.logKinds("start")
	s.api = api.New(api.Config{Pool: s.pool, Queue: s.queue, Logger: b.logger, Allowlist: b.cfg.Allowlist, Quorum: s.Quorum,
		Bundles: s.support, Join: s.join, MaxWatchesPerIdentity: b.cfg.MaxWatchesPerIdentity, Tracer: s.tracer, Secrets: s.secretStore(),
		FleetRuns: s.fleet})
	if s.gateway != nil {
		registerGateway(s.metrics.reg, s.gateway)
	}
	if s.sweeper != nil {
		registerSweeper(s.metrics.reg, s.sweeper)
	}
	return nil
}

func (b *builder) grpcServer() error {
	s := b.s
	s.authn.AllowUnauthenticated(healthpb.Health_ServiceDesc.ServiceName,
		reflectionv1.ServerReflection_ServiceDesc.ServiceName, reflectionv1alpha.ServerReflection_ServiceDesc.ServiceName)
	decode := newDecodeChecks()
	opts := []grpc.ServerOption{
		grpc.ForceServerCodecV2(decode.serverCodec()),
		grpc.ChainUnaryInterceptor(s.metrics.unary(), decode.unary(), s.authn.UnaryInterceptor()),
		grpc.ChainStreamInterceptor(s.metrics.stream(), decode.stream(), s.authn.StreamInterceptor()),
	}
	if b.creds != nil {
		opts = append(opts, grpc.Creds(b.creds))
	} else {
		s.logger.Warn("the API serves plaintext: set tls.cert and tls.key outside loopback and tests")
	}
	s.grpc = grpc.NewServer(opts...)
	if b.cfg.Runs(ComponentAPI) {
		s.api.Register(s.grpc)
		// The metal module's workflows (metal.power, metal.bulk), on the
		// context the module host gave the metal module (loaded in every
		// process by the modules step, before this one).
		(&metal.Service{Context: s.modules.Context("metal"), Quorum: s.Quorum, Logger: b.logger.Named("metal")}).Register(s.grpc)
	}
	s.health = health.NewServer()
	healthpb.RegisterHealthServer(s.grpc, s.health)
	// Reflection lets grpcurl, Postman and any language's tooling use the
	// API without our CLI or the .proto files.
	reflection.Register(s.grpc)
	return nil
}

func (b *builder) listeners(context.Context) error {
	s := b.s
	b.closeListener(&s.grpcLis)
	var err error
	if s.grpcLis, err = net.Listen("tcp", b.cfg.GRPCListen); err != nil {
		return fmt.Errorf("listening for gRPC on %s: %w", b.cfg.GRPCListen, err)
	}
	if b.cfg.HTTPListen == "" {
		return nil
	}
	b.closeListener(&s.httpLis)
	if s.httpLis, err = net.Listen("tcp", b.cfg.HTTPListen); err != nil {
		return fmt.Errorf("listening for HTTP on %s: %w", b.cfg.HTTPListen, err)
	}
	if b.httpTLS != nil {
		s.httpLis = tls.NewListener(s.httpLis, b.httpTLS)
	}
	return nil
}

func (b *builder) httpServer(context.Context) error {
	s := b.s
	if s.httpLis == nil {
		return nil
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", s.healthz)
	mux.HandleFunc("/readyz", s.readyz)
	mux.Handle("/metrics", promhttp.HandlerFor(s.metrics.reg, promhttp.HandlerOpts{}))
	if b.dir != nil {
		mux.Handle(b.dir.MountPath()+"/", b.dir.Handler())
	}
	if b.cfg.Runs(ComponentAPI) {
		// Support bundles for a caller with the node's read permission (the
		// console's download link): the API's token, no store credentials.
		mux.Handle(api.BundlePath, s.api.BundleHandler(s.authn))
	}
	if b.cfg.Runs(ComponentAPI) && !b.cfg.Browser.Disabled {
		if err := s.mountBrowser(mux, b.cfg.Browser, b.httpTLS != nil); err != nil {
			return err
		}
	}
	s.http = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	return nil
}
