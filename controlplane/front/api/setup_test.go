package api_test

import (
	"context"
	"encoding/json"
	"net"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/better-compute/commands/controlplane/commands/bundles"
	"github.com/better-compute/commands/controlplane/commands/kinds"
	"github.com/better-compute/commands/controlplane/commands/queue"
	"github.com/better-compute/commands/controlplane/front/api"
	"github.com/better-compute/commands/controlplane/internal/apierr"
	"github.com/better-compute/commands/controlplane/internal/errcode"
	"github.com/better-compute/commands/controlplane/internal/storetest"
	"github.com/better-compute/commands/controlplane/trust/auth"
	logsmanifest "github.com/better-compute/commands/plugins/logs/manifest"
	apiv1 "github.com/better-compute/commands/proto/bc/api/v1"
	"github.com/better-compute/commands/sdk/kind"
)

// manifest builds a test manifest; the tests own their kinds so that they do
// not change when a plugin's manifest does.
func manifest(name string, lane kind.Lane, flags kind.Flags, runnable bool, schema string) kind.Manifest {
	m := kind.Manifest{Kind: name, Lane: lane, Timeout: kind.Duration(5 * time.Minute), Roles: []string{"node"},
		Flags: flags, APIRunnable: runnable, Version: "1.0.0"}
	if schema != "" {
		m.PayloadSchema = json.RawMessage(schema)
	}
	return m
}

func testRegistry(t testing.TB) *kinds.Registry {
	t.Helper()
	// diag.nvml runs on a discovery ramdisk too, as the real manifest says
	// (the queue routes by the manifests' roles).
	nvml := manifest("diag.nvml", kind.LaneControl, kind.Flags{RetrySafe: true}, true, "")
	nvml.Roles = []string{"node", "discovery"}
	reg, err := kinds.NewRegistry(
		nvml,
		manifest("inventory.refresh", kind.LaneControl, kind.Flags{RetrySafe: true}, true,
			`{"type":"object","additionalProperties":false,"properties":{"sections":{"type":"array","items":{"type":"string"}},"rescan":{"type":"boolean"}}}`),
		logsmanifest.Manifest, // the real one: its schema requires the upload fields the API fills
		manifest("node.reboot", kind.LaneControl, kind.Flags{Destructive: true, SelfTerminating: true}, true, ""),
		manifest("gpu.reset", kind.LaneProvision, kind.Flags{Destructive: true}, false, ""),
		// API-runnable by its manifest, but not on the allowlist.
		manifest("vendor.blink", kind.LaneControl, kind.Flags{RetrySafe: true}, true, ""),
	)
	require.NoError(t, err)
	return reg
}

// The tokens of the test identities.
const (
	tokOps    = "ops-token"    // tenant_a, compute:nodes:* on every node
	tokReader = "reader-token" // tenant_a, compute:nodes:read only
	tokNarrow = "narrow-token" // tenant_a, compute:nodes:* on compute-node/node_gpu* only
	tokOther  = "other-token"  // tenant_b, compute:nodes:* on every node
	tokAdmin  = "admin-token"  // every tenant, every permission
	tokOps2   = "ops2-token"   // tenant_a, same grants as ops, another identity
)

const (
	tenantA = "tenant_a"
	tenantB = "tenant_b"
	nodeA1  = "node_a1"
	nodeA2  = "node_a2"
	nodeGPU = "node_gpu1"
	nodeB1  = "node_b1"
)

func testAuthConfig() *auth.Config {
	return &auth.Config{Identities: []auth.IdentityConfig{
		{Name: "ops", Tenants: []string{tenantA}, Tokens: []string{tokOps},
			Grants: []auth.Grant{{Permission: "compute:nodes:*", Resource: "compute-node/*"}}},
		{Name: "ops2", Tenants: []string{tenantA}, Tokens: []string{tokOps2},
			Grants: []auth.Grant{{Permission: "compute:nodes:*", Resource: "compute-node/*"}}},
		{Name: "reader", Tenants: []string{tenantA}, Tokens: []string{tokReader},
			Grants: []auth.Grant{{Permission: auth.PermNodesRead, Resource: "compute-node/*"}}},
		{Name: "narrow", Tenants: []string{tenantA}, Tokens: []string{tokNarrow},
			Grants: []auth.Grant{{Permission: "compute:nodes:*", Resource: "compute-node/node_gpu*"}}},
		{Name: "other", Tenants: []string{tenantB}, Tokens: []string{tokOther},
			Grants: []auth.Grant{{Permission: "compute:nodes:*", Resource: "compute-node/*"}}},
		{Name: "admin", Tenants: []string{"*"}, Tokens: []string{tokAdmin},
			Grants: []auth.Grant{{Permission: "*", Resource: "*"}}},
	}}
}

type bundle struct {
	pool  *pgxpool.Pool
	queue *queue.Queue
	api   *api.Server
	conn  *grpc.ClientConn
	addr  string
}

// setup starts the API on loopback over real gRPC and a fresh database with
// tenants a and b and their nodes.
func setup(t testing.TB, opts ...func(*api.Config)) *bundle {
	t.Helper()
	pool := storetest.DBConfig(t, func(c *pgxpool.Config) { c.MaxConns = 16 })
	q := queue.New(testRegistry(t), hclog.NewNullLogger())
	ctx := context.Background()
	for _, tn := range []string{tenantA, tenantB} {
		_, err := q.CreateTenant(ctx, pool, queue.Tenant{ID: tn})
		require.NoError(t, err)
	}
	for _, n := range []queue.Node{{ID: nodeA1, TenantID: tenantA}, {ID: nodeA2, TenantID: tenantA},
		{ID: nodeGPU, TenantID: tenantA}, {ID: nodeB1, TenantID: tenantB}} {
		_, err := q.CreateNode(ctx, pool, n)
		require.NoError(t, err)
	}
	store, err := bundles.NewDirStore(bundles.DirOptions{Root: t.TempDir(), BaseURL: "https://cp.example.com/v1/blobs",
		Secret: []byte("0123456789abcdef0123456789abcdef")})
	require.NoError(t, err)
	cfg := api.Config{Pool: pool, Queue: q, Logger: hclog.NewNullLogger(), WatchPoll: 200 * time.Millisecond,
		Bundles: bundles.New(store, 64<<20)}
	for _, o := range opts {
		o(&cfg)
	}
	srv := api.New(cfg)
	sctx, cancel := context.WithCancel(ctx)
	srv.Start(sctx)
	authn, err := auth.New(testAuthConfig())
	require.NoError(t, err)
	g := grpc.NewServer(grpc.ChainUnaryInterceptor(authn.UnaryInterceptor()), grpc.ChainStreamInterceptor(authn.StreamInterceptor()))
	srv.Register(g)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go func() { _ = g.Serve(lis) }()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = conn.Close()
		g.Stop()
		cancel()
	})
	return &bundle{pool: pool, queue: q, api: srv, conn: conn, addr: lis.Addr().String()}
}

// as returns a context that authenticates with token.
func as(token string) context.Context {
	return metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+token)
}

func (b *bundle) commands() apiv1.CommandsClient { return apiv1.NewCommandsClient(b.conn) }

func (b *bundle) run(t testing.TB, token string, req *apiv1.RunCommandRequest) (*apiv1.Command, error) {
	t.Helper()
	return b.commands().Run(as(token), req)
}

// requireCode asserts an API error: its gRPC code and ErrorInfo reason.
func requireCode(t testing.TB, err error, code errcode.Code) apierr.Info {
	t.Helper()
	require.Error(t, err)
	in, ok := apierr.Parse(err)
	require.True(t, ok, "not a gRPC status: %v", err)
	require.Equal(t, code, in.Code, "ErrorInfo.Reason of %v", err)
	require.Equal(t, apierr.GRPCCode(code), in.GRPC, "gRPC code of %v", err)
	return in
}

func ptr[T any](v T) *T { return &v }

// setState moves a command the way the gateway would, for the cancel cases.
func (b *bundle) setState(t testing.TB, commandID string, to queue.State) {
	t.Helper()
	_, ok, err := b.queue.Transition(context.Background(), b.pool, queue.Transition{CommandID: commandID, To: to, Reason: "test"})
	require.NoError(t, err)
	require.True(t, ok)
}
