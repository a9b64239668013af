package server_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/better-compute/commands/controlplane/server/servertest"
	"github.com/better-compute/commands/controlplane/testing/fakedaemon"
	"github.com/better-compute/commands/internal/testutil"
	"github.com/better-compute/commands/internal/trust"
	agentv1 "github.com/better-compute/commands/proto/bc/agent/v1"
	apiv1 "github.com/better-compute/commands/proto/bc/api/v1"
)

// Deleting a node ends it everywhere: the session a replica holds for it
// closes (NOT_FOUND), its running command is cancelled with reason
// node-deleted, its certificate opens no new session, and a join token made
// before the deletion no longer joins.
func TestDeletedNodesSessionClosesAndItsCertificateStopsWorking(t *testing.T) {
	t.Parallel()
	primary := servertest.Start(t, nil)
	replica := servertest.StartReplica(t, primary, nil)
	creds := primary.JoinNode(t, servertest.NodeA1)
	spare := primary.JoinToken(t, servertest.NodeA1)

	conn, err := grpc.NewClient(replica.Gateway, grpc.WithTransportCredentials(creds))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	d := fakedaemon.New(servertest.NodeA1)
	d.Kinds = kindDigests(primary)
	d.Script = func(*agentv1.Command) fakedaemon.Action { return fakedaemon.Action{Kind: fakedaemon.Hang} }
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	ended := make(chan error, 1)
	go func() { ended <- d.Run(ctx, conn) }()
	testutil.WaitFor(t, 10*time.Second, "welcome", func() bool { return d.Welcome() != nil })

	cmds := apiv1.NewCommandsClient(dial(t, primary.GRPC))
	cmd, err := cmds.Run(as(servertest.TokOps), &apiv1.RunCommandRequest{TenantId: servertest.TenantA, NodeId: servertest.NodeA1, Kind: "diag.nvml"})
	require.NoError(t, err)
	get := func() *apiv1.Command {
		got, err := cmds.Get(as(servertest.TokOps), &apiv1.GetCommandRequest{TenantId: servertest.TenantA, NodeId: servertest.NodeA1, CommandId: cmd.GetId()})
		require.NoError(t, err)
		return got
	}
	testutil.WaitFor(t, 10*time.Second, "the command to run", func() bool { return get().GetState() == "running" })

	del, err := apiv1.NewNodesClient(dial(t, primary.GRPC)).Delete(as(servertest.TokOps),
		&apiv1.DeleteNodeRequest{TenantId: servertest.TenantA, NodeId: servertest.NodeA1})
	require.NoError(t, err)
	require.EqualValues(t, 1, del.GetCancelledCommands())

	select {
	case err := <-ended:
		require.Equal(t, codes.NotFound, status.Code(err), "%v", err)
		require.Contains(t, err.Error(), "deleted")
	case <-time.After(20 * time.Second):
		t.Fatal("the deleted node's session stayed open")
	}
	testutil.WaitFor(t, 10*time.Second, "the replica to drop the session", func() bool { return replica.Server.Gateway().Sessions() == 0 })
	got := get()
	require.Equal(t, "cancelled", got.GetState())
	require.Equal(t, "node-deleted", got.GetReason())

	// The certificate opens no new session, on either replica.
	for _, gw := range []string{primary.Gateway, replica.Gateway} {
		c, err := grpc.NewClient(gw, grpc.WithTransportCredentials(creds))
		require.NoError(t, err)
		t.Cleanup(func() { _ = c.Close() })
		err = fakedaemon.New(servertest.NodeA1).Run(context.Background(), c)
		require.Equal(t, codes.NotFound, status.Code(err), "%v", err)
	}
	// A token made before the deletion does not join.
	_, csr, err := trust.NewKeyAndCSR(servertest.NodeA1)
	require.NoError(t, err)
	_, err = agentv1.NewJoinClient(noCertConn(t, primary)).Join(context.Background(), &agentv1.JoinRequest{Token: spare, Csr: csr})
	require.Equal(t, codes.NotFound, status.Code(err), "%v", err)
	// Nor can a new one be made.
	_, err = apiv1.NewNodesClient(dial(t, primary.GRPC)).CreateJoinToken(as(servertest.TokOps),
		&apiv1.CreateJoinTokenRequest{TenantId: servertest.TenantA, NodeId: servertest.NodeA1})
	require.Equal(t, codes.NotFound, status.Code(err), "%v", err)
}
