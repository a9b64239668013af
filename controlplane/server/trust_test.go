package server_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"

	"github.com/better-compute/commands/controlplane/commands/queue"
	"github.com/better-compute/commands/controlplane/server"
	"github.com/better-compute/commands/controlplane/server/servertest"
	"github.com/better-compute/commands/controlplane/testing/fakedaemon"
	"github.com/better-compute/commands/controlplane/trust/nodecerts"
	"github.com/better-compute/commands/internal/testutil"
	"github.com/better-compute/commands/internal/trust"
	agentv1 "github.com/better-compute/commands/proto/bc/agent/v1"
)

// "JoinResponse and Welcome carry the trust bundle" and "Every issued
// certificate is recorded (node_certs: serial, node, role, allowed kinds,
// validity). A re-join supersedes the node's earlier certificate".
func TestServer_JoinCarriesTheTrustBundleAndRecordsTheCertificate(t *testing.T) {
	signing, _ := servertest.Signing(t)
	r := servertest.Start(t, signing)
	require.NotNil(t, r.Server.Signer())
	first := r.Join(t, servertest.NodeA1)
	b, _, err := trust.VerifyBundle(first.Response.GetTrustBundle().GetSigned(), nil, time.Now())
	require.NoError(t, err)
	require.True(t, b.HasRoots())
	require.Equal(t, b.Version, first.Response.GetTrustBundle().GetVersion())

	second := r.Join(t, servertest.NodeA1, "inventory.refresh")
	certs, err := nodecerts.List(context.Background(), r.Pool, servertest.NodeA1)
	require.NoError(t, err)
	require.Len(t, certs, 2)
	require.Equal(t, "current", certs[0].State())
	require.Equal(t, []string{"inventory.refresh"}, certs[0].AllowedKinds)
	require.Equal(t, "superseded", certs[1].State())
	_ = second
}

// "The gateway and the API can run as separate processes of bc-server (for
// example --components gateway and --components api,sweeper), so a gateway
// host holds no key at all": the gateway-only replica never reads the root,
// yet its Welcome carries the bundle the api published, and commands the
// api signed reach the node through it with their signatures.
func TestServer_AGatewayOnlyProcessHoldsNoKeyAndRelaysSignedCommands(t *testing.T) {
	signing, _ := servertest.Signing(t)
	api := servertest.Start(t, func(c *server.Config) {
		signing(c)
		c.Components = []string{server.ComponentAPI, server.ComponentSweeper}
	})
	require.NotNil(t, api.Server.Signer())
	require.Nil(t, api.Server.Gateway(), "the api process runs no gateway")
	gw := servertest.StartReplica(t, api, func(c *server.Config) {
		c.Components = []string{server.ComponentGateway}
		c.Gateway = api.Config.Gateway
		c.Gateway.Listen = "127.0.0.1:0"
	})
	require.Nil(t, gw.Server.Signer(), "a gateway-only process reads no signing key")
	require.NotNil(t, gw.Server.Gateway())

	// The node joins at the gateway; the bundle comes from the database.
	j := gw.Join(t, servertest.NodeA1)
	bundle, _, err := trust.VerifyBundle(j.Response.GetTrustBundle().GetSigned(), nil, time.Now())
	require.NoError(t, err)
	conn, err := grpc.NewClient(gw.Gateway, grpc.WithTransportCredentials(j.Creds))
	require.NoError(t, err)
	defer conn.Close()
	d := fakedaemon.New(servertest.NodeA1)
	d.Kinds = kindDigests(gw)
	d.Verify = func(env *agentv1.CommandEnvelope) error {
		_, err := trust.VerifyCommand(&bundle, env, servertest.NodeA1, time.Now())
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = d.Run(ctx, conn) }()
	testutil.WaitFor(t, 10*time.Second, "welcome", func() bool { return d.Welcome() != nil })
	_, _, err = trust.VerifyBundle(d.Welcome().GetTrustBundle().GetSigned(), nil, time.Now())
	require.NoError(t, err)

	// Queued by the api process's own queue, which signs.
	var c queue.Command
	require.NoError(t, pgx.BeginFunc(ctx, api.Pool, func(tx pgx.Tx) error {
		var err error
		c, _, err = api.Server.Queue().Enqueue(ctx, tx, queue.EnqueueParams{TenantID: servertest.TenantA, NodeID: servertest.NodeA1, Kind: "inventory.refresh"})
		return err
	}))
	require.NotEmpty(t, c.Signature)
	id := c.ID
	testutil.WaitFor(t, 15*time.Second, "the signed command to succeed through the gateway-only process", func() bool {
		got, err := api.Queue.Get(context.Background(), api.Pool, servertest.NodeA1, id)
		require.NoError(t, err)
		return got.State == queue.Succeeded
	})
	require.Len(t, d.Envelopes(), 1)
	require.NotEmpty(t, d.Envelopes()[0].GetSignature())
}
