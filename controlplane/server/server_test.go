package server_test

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	reflectionv1 "google.golang.org/grpc/reflection/grpc_reflection_v1"

	"github.com/better-compute/commands/controlplane/internal/apierr"
	"github.com/better-compute/commands/controlplane/internal/errcode"
	"github.com/better-compute/commands/controlplane/server"
	"github.com/better-compute/commands/controlplane/server/servertest"
	apiv1 "github.com/better-compute/commands/proto/bc/api/v1"
)

func dial(t *testing.T, addr string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(b)
}

func TestServesAPIHealthMetricsAndReflection(t *testing.T) {
	t.Parallel()
	r := servertest.Start(t, nil)
	conn := dial(t, r.GRPC)
	ctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+servertest.TokOps)

	c, err := apiv1.NewCommandsClient(conn).Run(ctx, &apiv1.RunCommandRequest{TenantId: servertest.TenantA, NodeId: servertest.NodeA1, Kind: "diag.nvml"})
	require.NoError(t, err)
	require.Equal(t, "pending", c.GetState())
	_, err = apiv1.NewCommandsClient(conn).Run(ctx, &apiv1.RunCommandRequest{TenantId: servertest.TenantA, NodeId: servertest.NodeA1, Kind: "gpu.reset"})
	require.Equal(t, errcode.Unsupported, apierr.CodeOf(err))

	code, body := get(t, "http://"+r.HTTP+"/healthz")
	require.Equal(t, http.StatusOK, code, body)
	code, body = get(t, "http://"+r.HTTP+"/readyz")
	require.Equal(t, http.StatusOK, code, body)
	code, body = get(t, "http://"+r.HTTP+"/metrics")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, `bc_api_requests_total{code="OK",method="/bc.api.v1.Commands/Run"} 1`)
	require.Contains(t, body, `bc_api_requests_total{code="UNSUPPORTED",method="/bc.api.v1.Commands/Run"} 1`)
	require.Contains(t, body, "bc_db_pool_max_conns")

	// Health and reflection need no credentials.
	h, err := healthpb.NewHealthClient(conn).Check(context.Background(), &healthpb.HealthCheckRequest{})
	require.NoError(t, err)
	require.Equal(t, healthpb.HealthCheckResponse_SERVING, h.GetStatus())

	rc, err := reflectionv1.NewServerReflectionClient(conn).ServerReflectionInfo(context.Background())
	require.NoError(t, err)
	require.NoError(t, rc.Send(&reflectionv1.ServerReflectionRequest{MessageRequest: &reflectionv1.ServerReflectionRequest_ListServices{}}))
	resp, err := rc.Recv()
	require.NoError(t, err)
	var names []string
	for _, s := range resp.GetListServicesResponse().GetService() {
		names = append(names, s.GetName())
	}
	require.Subset(t, names, []string{"bc.api.v1.Commands", "bc.api.v1.Events", "bc.api.v1.Nodes"})
	require.NoError(t, rc.CloseSend())
}

// Graceful shutdown: watches end with UNAVAILABLE and their cursor, Run
// returns without an error, and the listeners close.
func TestGracefulShutdown(t *testing.T) {
	t.Parallel()
	r := servertest.Start(t, nil)
	conn := dial(t, r.GRPC)
	ctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+servertest.TokOps)
	stream, err := apiv1.NewEventsClient(conn).Watch(ctx, &apiv1.WatchEventsRequest{TenantId: servertest.TenantA, Cursor: "now"})
	require.NoError(t, err)
	_, err = stream.Header()
	require.NoError(t, err)

	require.NoError(t, r.Stop())
	_, err = stream.Recv()
	in, ok := apierr.Parse(err)
	require.True(t, ok, "%v", err)
	require.Equal(t, errcode.Unavailable, in.Code)
	require.NotEmpty(t, in.Details["cursor"], "the client is told where to resume")

	_, err = http.Get("http://" + r.HTTP + "/healthz")
	require.Error(t, err, "the HTTP listener is closed")
}

func TestLoadConfig(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	p := filepath.Join(dir, "server.yaml")
	require.NoError(t, os.WriteFile(p, []byte(`grpcListen: 127.0.0.1:9000
shutdownTimeout: 3s
allowlist: [diag.nvml]
auth:
  identities:
    - name: ops
      tenants: [tenant_a]
      tokens: [t]
      grants:
        - permission: "compute:nodes:*"
          resource: "compute-node/*"
`), 0o600))
	cfg, err := server.LoadConfig(p)
	require.NoError(t, err)
	require.Equal(t, "127.0.0.1:9000", cfg.GRPCListen)
	require.Equal(t, server.DefaultHTTPListen, cfg.HTTPListen, "defaults stay for what the file leaves out")
	require.Equal(t, server.Duration(3*time.Second), cfg.ShutdownTimeout)
	require.Len(t, cfg.Auth.Identities, 1)

	require.NoError(t, os.WriteFile(p, []byte("grpcListn: x\n"), 0o600))
	_, err = server.LoadConfig(p)
	require.Error(t, err)
	require.True(t, strings.Contains(err.Error(), "grpcListn"), "a misspelt key is an error: %v", err)
}
