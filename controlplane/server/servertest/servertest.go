// Package servertest starts a real control plane server for tests: a fresh
// PostgreSQL database (internal/pgtest), loopback listeners and a set of test
// identities, kinds, tenants and nodes.
package servertest

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/better-compute/commands/internal/trust"

	"github.com/hashicorp/go-hclog"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/better-compute/commands/controlplane/commands/bundles"
	"github.com/better-compute/commands/controlplane/commands/fleetruns"
	"github.com/better-compute/commands/controlplane/commands/kinds"
	"github.com/better-compute/commands/controlplane/commands/queue"
	"github.com/better-compute/commands/controlplane/fleet/nodehealth"
	"github.com/better-compute/commands/controlplane/front/join"
	"github.com/better-compute/commands/controlplane/internal/store"
	"github.com/better-compute/commands/controlplane/server"
	"github.com/better-compute/commands/controlplane/trust/auth"
	"github.com/better-compute/commands/controlplane/trust/pki"
	"github.com/better-compute/commands/internal/pgtest"
	"github.com/better-compute/commands/internal/testutil"
	agentv1 "github.com/better-compute/commands/proto/bc/agent/v1"
	"github.com/better-compute/commands/sdk/kind"
)

// The fixtures every started server has.
const (
	TenantA  = "tenant_a"
	TenantB  = "tenant_b"
	NodeA1   = "node_a1"
	NodeB1   = "node_b1"
	TokOps   = "ops-token"    // tenant_a, compute:nodes:* on every node, batches create and read, compute:pools:* on every pool
	TokRead  = "reader-token" // tenant_a, compute:nodes:read and compute:pools:read only
	TokOther = "other-token"  // tenant_b, compute:nodes:*
	TokAdmin = "admin-token"  // everything
)

// Manifests are the test kinds: the four API kinds, gpu.reset (not
// API-runnable) and vendor.blink (API-runnable, not allowlisted).
func Manifests() []kind.Manifest {
	mk := func(name string, lane kind.Lane, flags kind.Flags, runnable bool, roles ...string) kind.Manifest {
		if len(roles) == 0 {
			roles = []string{"node"}
		}
		return kind.Manifest{Kind: name, Lane: lane, Timeout: kind.Duration(5 * time.Minute), Roles: roles,
			Flags: flags, APIRunnable: runnable, Version: "1.0.0"}
	}
	// The roles are the first-party kinds': a discovery ramdisk runs
	// diag.nvml and inventory.refresh too.
	return []kind.Manifest{
		mk("diag.nvml", kind.LaneControl, kind.Flags{RetrySafe: true}, true, "node", "discovery"),
		mk("inventory.refresh", kind.LaneControl, kind.Flags{RetrySafe: true}, true, "node", "discovery"),
		mk("logs.collect", kind.LaneBulk, kind.Flags{RetrySafe: true}, true),
		mk("node.reboot", kind.LaneControl, kind.Flags{Destructive: true, SelfTerminating: true}, true),
		mk("gpu.reset", kind.LaneProvision, kind.Flags{Destructive: true}, false),
		mk("vendor.blink", kind.LaneControl, kind.Flags{RetrySafe: true}, true),
	}
}

// AuthConfig is the test identities.
func AuthConfig() auth.Config {
	all := []auth.Grant{{Permission: "compute:nodes:*", Resource: "compute-node/*"}}
	return auth.Config{Identities: []auth.IdentityConfig{
		{Name: "ops", Tenants: []string{TenantA}, Tokens: []string{TokOps}, Grants: append(append([]auth.Grant(nil), all...),
			auth.Grant{Permission: auth.PermBatchesCreate, Resource: "tenant/*"}, auth.Grant{Permission: auth.PermBatchesRead, Resource: "tenant/*"}, auth.Grant{Permission: auth.PermBatchesApprove, Resource: "tenant/*"},
			auth.Grant{Permission: auth.PermSecretsWrite, Resource: "tenant/*"}, auth.Grant{Permission: auth.PermSecretsRead, Resource: "tenant/*"},
			auth.Grant{Permission: "compute:pools:*", Resource: "compute-pool/*"})},
		{Name: "reader", Tenants: []string{TenantA}, Tokens: []string{TokRead},
			Grants: []auth.Grant{{Permission: auth.PermNodesRead, Resource: "compute-node/*"}, {Permission: auth.PermPoolsRead, Resource: "compute-pool/*"}}},
		{Name: "other", Tenants: []string{TenantB}, Tokens: []string{TokOther}, Grants: all},
		{Name: "admin", Tenants: []string{"*"}, Tokens: []string{TokAdmin}, Grants: []auth.Grant{{Permission: "*", Resource: "*"}}},
	}}
}

// Running is a started server.
type Running struct {
	// Server is the server.
	Server *server.Server
	// GRPC is the API's host:port; HTTP the health and metrics host:port.
	GRPC, HTTP string
	// HTTPBase is the HTTP listener's URL ("http://host:port", or https
	// with httpTls), and HTTPClient a client that trusts its certificate.
	HTTPBase   string
	HTTPClient *http.Client
	// Gateway is the node-facing host:port (Session and Join), "" when the
	// adjusted config turned it off; CADir holds the node CA's ca.pem and
	// CA is that CA, nil when off.
	Gateway string
	CADir   string
	CA      *pki.CA
	// Pool is a pool of the test's own on the server's database.
	Pool *pgxpool.Pool
	// Queue reads and moves commands the way the gateway would.
	Queue *queue.Queue
	// Stop stops the server and waits for Run to return its error.
	Stop func() error
	// Config is the config the server runs with (after adjust).
	Config server.Config
	// dbName is the database, which a replica shares.
	dbName string
}

// Start starts a server on a fresh database with tenants a and b and nodes
// node_a1 and node_b1. adjust may change the config first.
func Start(t testing.TB, adjust func(*server.Config)) *Running {
	t.Helper()
	return StartLogged(t, hclog.NewNullLogger(), adjust)
}

// StartLogged is Start with the server logging to logger, for tests that
// read what an operator would see in the log.
func StartLogged(t testing.TB, logger hclog.Logger, adjust func(*server.Config)) *Running {
	t.Helper()
	return startOn(t, "", logger, adjust)
}

// StartDSN is Start on the database at dsn, which the caller made and keeps
// (the failover test's formation, through its multi-host connection
// string), instead of a fresh database of pgtest's.
func StartDSN(t testing.TB, dsn string, logger hclog.Logger, adjust func(*server.Config)) *Running {
	t.Helper()
	return startOn(t, dsn, logger, adjust)
}

// startOn starts a server on dsn, or on a fresh database of pgtest's when
// dsn is empty.
func startOn(t testing.TB, dsn string, logger hclog.Logger, adjust func(*server.Config)) *Running {
	t.Helper()
	name := ""
	cfg := server.DefaultConfig()
	if dsn == "" {
		name = pgtest.Create(t)
		dsn = "dbname=" + name
	}
	cfg.DatabaseURL = dsn
	cfg.GRPCListen, cfg.HTTPListen = "127.0.0.1:0", "127.0.0.1:0"
	cfg.Auth = AuthConfig()
	cfg.ShutdownTimeout = server.Duration(5 * time.Second)
	cfg.Gateway = server.GatewayConfig{Listen: "127.0.0.1:0", CADir: t.TempDir(), ServerHosts: []string{"127.0.0.1", "localhost"},
		Poll: server.Duration(200 * time.Millisecond), CancelResend: server.Duration(200 * time.Millisecond),
		BusyBackoffMin: server.Duration(50 * time.Millisecond), BusyBackoffMax: server.Duration(200 * time.Millisecond)}
	cfg.Sweeper.Interval = server.Duration(200 * time.Millisecond)
	secret := filepath.Join(t.TempDir(), "blob.key")
	require.NoError(t, os.WriteFile(secret, []byte("0123456789abcdef0123456789abcdef"), 0o600))
	cfg.SupportBundles = &bundles.Config{Blob: bundles.BlobConfig{Driver: "dir", Dir: &bundles.DirConfig{
		Path: t.TempDir(), BaseURL: "http://127.0.0.1/v1/blobs", SecretFile: secret}}}
	if adjust != nil {
		adjust(&cfg)
	}
	return start(t, name, cfg, logger, true)
}

// StartReplica starts a second server on primary's database and node CA, as
// another replica of the control plane runs: its own API, gateway and
// sweeper on new loopback ports, the fixtures primary made. adjust may
// change the config (a copy of primary's) first.
func StartReplica(t testing.TB, primary *Running, adjust func(*server.Config)) *Running {
	t.Helper()
	cfg := primary.Config
	cfg.GRPCListen, cfg.HTTPListen = "127.0.0.1:0", "127.0.0.1:0"
	if cfg.Gateway.Listen != "" {
		cfg.Gateway.Listen = "127.0.0.1:0"
	}
	if adjust != nil {
		adjust(&cfg)
	}
	return start(t, primary.dbName, cfg, hclog.NewNullLogger(), false)
}

// start runs a server with cfg on database name, making the fixtures first
// when asked.
func start(t testing.TB, name string, cfg server.Config, logger hclog.Logger, fixtures bool) *Running {
	t.Helper()
	reg, err := kinds.NewRegistry(Manifests()...)
	require.NoError(t, err)
	ctx := context.Background()
	srv, err := server.New(ctx, cfg, reg, logger)
	require.NoError(t, err)

	var pcfg *pgxpool.Config
	if name != "" {
		pcfg = pgtest.Config(t, name)
	} else {
		pcfg, err = pgxpool.ParseConfig(cfg.DatabaseURL)
		require.NoError(t, err)
	}
	store.ConfigurePool(pcfg)
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	require.NoError(t, err)
	q := queue.New(reg, hclog.NewNullLogger())
	// The test's own settles (SetState) move fleet runs' targets, as the
	// server's do.
	q.AlsoOnSettle(fleetruns.SettleHook)
	q.AlsoOnSettle(nodehealth.SettleHook)
	if fixtures {
		for _, tn := range []string{TenantA, TenantB} {
			_, err := q.CreateTenant(ctx, pool, queue.Tenant{ID: tn})
			require.NoError(t, err)
		}
		for _, n := range []queue.Node{{ID: NodeA1, TenantID: TenantA}, {ID: NodeB1, TenantID: TenantB}} {
			_, err := q.CreateNode(ctx, pool, n)
			require.NoError(t, err)
		}
	}

	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- srv.Run(runCtx) }()
	stopped := false
	var runErr error
	stop := func() error {
		if !stopped {
			stopped = true
			cancel()
			runErr = <-done
		}
		return runErr
	}
	// Cleanups run last-in first-out: stop the server before the pool
	// closes and pgtest drops the database.
	t.Cleanup(pool.Close)
	t.Cleanup(func() { _ = stop() })
	r := &Running{Server: srv, GRPC: srv.GRPCAddr().String(), Pool: pool, Queue: q, Stop: stop, Config: cfg, dbName: name}
	if a := srv.GatewayAddr(); a != nil {
		r.Gateway, r.CADir, r.CA = a.String(), cfg.Gateway.CADir, srv.CA()
	}
	if a := srv.HTTPAddr(); a != nil {
		r.HTTP, r.HTTPBase, r.HTTPClient = a.String(), "http://"+a.String(), &http.Client{Timeout: 30 * time.Second}
		if cfg.HTTPTLS.Cert != "" {
			pem, err := os.ReadFile(cfg.HTTPTLS.Cert)
			require.NoError(t, err)
			roots := x509.NewCertPool()
			require.True(t, roots.AppendCertsFromPEM(pem))
			r.HTTPBase = "https://" + a.String()
			r.HTTPClient.Transport = &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}}
		}
		testutil.WaitFor(t, 10*time.Second, "the server to be ready", func() bool {
			resp, err := r.HTTPClient.Get(r.HTTPBase + "/readyz")
			if err != nil {
				return false
			}
			resp.Body.Close()
			return resp.StatusCode == http.StatusOK
		})
	}
	return r
}

// JoinToken creates a one-time join token for nodeID; allowedKinds make it a
// restricted identity.
func (r *Running) JoinToken(t testing.TB, nodeID string, allowedKinds ...string) string {
	t.Helper()
	require.NotNil(t, r.Server.Join(), "the gateway is off")
	tok, err := r.Server.Join().CreateToken(context.Background(), r.Pool, join.TokenRequest{NodeID: nodeID, AllowedKinds: allowedKinds})
	require.NoError(t, err)
	return tok.Value
}

// JoinNode joins nodeID through the Join RPC, as bcd does, and returns TLS
// credentials that open sessions on the gateway with the new certificate.
func (r *Running) JoinNode(t testing.TB, nodeID string, allowedKinds ...string) credentials.TransportCredentials {
	t.Helper()
	j := r.Join(t, nodeID, allowedKinds...)
	return j.Creds
}

// Joined is what a join hands the node.
type Joined struct {
	Creds    credentials.TransportCredentials
	Response *agentv1.JoinResponse
	KeyPEM   []byte
}

// Join is JoinNode with the join answer and the node key.
func (r *Running) Join(t testing.TB, nodeID string, allowedKinds ...string) Joined {
	t.Helper()
	keyPEM, csr, err := trust.NewKeyAndCSR(nodeID)
	require.NoError(t, err)
	conn, err := grpc.NewClient(r.Gateway, grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{
		RootCAs: r.CA.Pool(), MinVersion: tls.VersionTLS12})))
	require.NoError(t, err)
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := agentv1.NewJoinClient(conn).Join(ctx, &agentv1.JoinRequest{Token: r.JoinToken(t, nodeID, allowedKinds...), Csr: csr})
	require.NoError(t, err)
	cert, err := tls.X509KeyPair(resp.GetCertificate(), keyPEM)
	require.NoError(t, err)
	roots := x509.NewCertPool()
	require.True(t, roots.AppendCertsFromPEM(resp.GetCa()))
	return Joined{Creds: credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: roots, MinVersion: tls.VersionTLS12}),
		Response: resp, KeyPEM: keyPEM}
}

// Signing returns an adjust that turns command signing on with a new root
// written under a temp dir, and the root's path.
func Signing(t testing.TB) (func(*server.Config), string) {
	t.Helper()
	_, root, err := trust.NewEd25519()
	require.NoError(t, err)
	pemBytes, err := trust.MarshalPrivateKeyPEM(root)
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "command-root.pem")
	require.NoError(t, os.WriteFile(path, pemBytes, 0o600))
	return func(c *server.Config) { c.PKI.CommandSigning = path }, path
}

// SetProgress records a progress report as the gateway would.
func (r *Running) SetProgress(t testing.TB, commandID string, progress any) {
	t.Helper()
	b, err := json.Marshal(progress)
	require.NoError(t, err)
	ok, err := r.Queue.RecordProgress(context.Background(), r.Pool, commandID, 0, b)
	require.NoError(t, err)
	require.True(t, ok, "progress of %s recorded", commandID)
}

// SetState moves a command as the gateway would.
func (r *Running) SetState(t testing.TB, commandID string, to queue.State, reason string, result any) {
	t.Helper()
	tr := queue.Transition{CommandID: commandID, To: to, Reason: reason}
	if result != nil {
		b, err := json.Marshal(result)
		require.NoError(t, err)
		tr.Result = b
	}
	_, ok, err := r.Queue.Transition(context.Background(), r.Pool, tr)
	require.NoError(t, err)
	require.True(t, ok, "transition of %s to %s landed", commandID, to)
}
