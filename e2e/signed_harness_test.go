package e2e

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/better-compute/commands/bcd/conditions"
	"github.com/better-compute/commands/controlplane/commands/queue"
	"github.com/better-compute/commands/controlplane/server"
	"github.com/better-compute/commands/controlplane/server/servertest"
	"github.com/better-compute/commands/internal/testutil"
	apiv1 "github.com/better-compute/commands/proto/bc/api/v1"
)

// firstPartyPlugins are the plugin binaries bcd ships (packaging puts them
// in bin/plugins under these names).
var firstPartyPlugins = []string{
	"./plugins/nvml/cmd/bc-kind-nvml",
	"./plugins/logs/cmd/bc-kind-logs",
	"./plugins/gpureset/cmd/bc-kind-gpureset",
	"./plugins/dcgm/cmd/bc-kind-dcgm",
	"./plugins/reboot/cmd/bc-kind-reboot",
}

// newSignedCluster starts a control plane with command signing on
// (servertest.Signing) whose registry holds the first-party manifests, and a
// plugin directory with the first-party plugins alone.
//
// servertest.Start registers its own test manifests of inventory.refresh,
// diag.nvml, logs.collect, node.reboot and gpu.reset (the same versions,
// other digests than the plugins serve, so the gateway would hold their
// commands as kind-mismatch). So the test stops that server and starts one
// built as bc-server builds it (server.New with no registry: the
// first-party manifests), on the same database, node CA and addresses. The
// HTTP listener keeps its port so that the dir blob store's presigned URLs
// (logs.collect's upload) name it.
func newSignedCluster(t *testing.T) *cluster {
	t.Helper()
	signing, _ := servertest.Signing(t)
	return newFirstPartyCluster(t, signing)
}

// newFirstPartyCluster is newSignedCluster with adjust (nil: none) in place
// of servertest.Signing: without it, a control plane that does not sign.
func newFirstPartyCluster(t *testing.T, adjust func(*server.Config)) *cluster {
	t.Helper()
	c := &cluster{t: t, bcd: testutil.BuildBinary(t, "./bcd/cmd/bcd"), plugins: t.TempDir()}
	for _, pkg := range firstPartyPlugins {
		src := testutil.BuildBinary(t, pkg)
		b, err := os.ReadFile(src)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(c.plugins, filepath.Base(pkg)), b, 0o755))
	}
	first := servertest.Start(t, adjust)
	require.NoError(t, first.Stop())

	cfg := first.Config
	cfg.GRPCListen, cfg.Gateway.Listen, cfg.HTTPListen = first.GRPC, first.Gateway, first.HTTP
	sb := *cfg.SupportBundles
	dir := *sb.Blob.Dir
	dir.BaseURL = "http://" + first.HTTP + "/v1/blobs"
	sb.Blob.Dir = &dir
	cfg.SupportBundles = &sb
	srv, err := server.New(context.Background(), cfg, nil, hclog.NewNullLogger())
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	stopped := false
	stop := func() error {
		if stopped {
			return nil
		}
		stopped = true
		cancel()
		return <-done
	}
	t.Cleanup(func() { _ = stop() })
	testutil.WaitFor(t, 30*time.Second, "the first-party server to be ready", func() bool {
		resp, err := http.Get("http://" + first.HTTP + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	c.srv = &servertest.Running{Server: srv, GRPC: first.GRPC, HTTP: first.HTTP, Gateway: first.Gateway, CADir: first.CADir,
		CA: srv.CA(), Pool: first.Pool, Queue: srv.Queue(), Stop: stop, Config: cfg}
	c.cfg = cfg
	conn, err := grpc.NewClient(c.srv.GRPC, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	c.conn, c.api = conn, apiv1.NewCommandsClient(conn)
	return c
}

// enqueue queues a command through the server's own queue, which signs it,
// as a module does for the kinds commands.run refuses (gpu.reset and
// diag.dcgm are not API-runnable).
func (c *cluster) enqueue(k string, payload any) string {
	c.t.Helper()
	b, err := json.Marshal(payload)
	require.NoError(c.t, err)
	ctx := context.Background()
	var cmd queue.Command
	require.NoError(c.t, pgx.BeginFunc(ctx, c.srv.Pool, func(tx pgx.Tx) error {
		var err error
		cmd, _, err = c.srv.Server.Queue().Enqueue(ctx, tx, queue.EnqueueParams{TenantID: servertest.TenantA, NodeID: servertest.NodeA1, Kind: k, Payload: b})
		return err
	}))
	return cmd.ID
}

// succeeded waits for the command to succeed (failing at once, with its
// reason, when it settles otherwise) and checks that it went out signed.
func (c *cluster) succeeded(id string) *apiv1.Command {
	c.t.Helper()
	var got *apiv1.Command
	testutil.WaitFor(c.t, 90*time.Second, "command "+id+" to settle", func() bool {
		got = c.get(id)
		switch got.GetState() {
		case "succeeded":
			return true
		case "failed", "cancelled", "expired":
			c.t.Fatalf("%s %s ended %s: %s: %s (result %v)", got.GetKind(), id, got.GetState(), got.GetReason(), got.GetMessage(), got.GetResult())
		}
		return false
	})
	require.True(c.t, got.GetSigned(), "%s %s went out signed (commands.get shows signed: true)", got.GetKind(), id)
	require.Empty(c.t, got.GetWaitingReason())
	return got
}

func resultOf(cmd *apiv1.Command) map[string]any { return cmd.GetResult().GetStructValue().AsMap() }

// nodeTrust waits until nodes.get shows that the node holds the trust
// bundle: its TrustBundle condition True and a trustVersion.
func (c *cluster) nodeTrust() *apiv1.Node {
	c.t.Helper()
	nodes := apiv1.NewNodesClient(c.conn)
	var got *apiv1.Node
	testutil.WaitFor(c.t, 30*time.Second, "the node's TrustBundle condition", func() bool {
		n, err := nodes.Get(c.ctx(), &apiv1.GetNodeRequest{TenantId: servertest.TenantA, NodeId: servertest.NodeA1})
		if err != nil {
			return false
		}
		got = n
		for _, cond := range n.GetConditions() {
			if cond.GetType() == conditions.TypeTrustBundle {
				return cond.GetStatus() == "True"
			}
		}
		return false
	})
	require.Positive(c.t, got.GetTrustVersion(), "nodes.get shows the bundle version the node holds")
	return got
}

// signedNode joins the node with `bcd join` and checks that it took the join
// answer's trust bundle.
func (c *cluster) signedNode() *node {
	c.t.Helper()
	n := c.join()
	require.Contains(c.t, n.joinOut, "(commands must be signed)", "bcd join stores the join answer's trust bundle")
	_, err := os.Stat(filepath.Join(n.state, "trust.json"))
	require.NoError(c.t, err)
	return n
}
