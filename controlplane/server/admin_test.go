package server_test

import (
	"context"
	"testing"

	"github.com/better-compute/commands/internal/trust"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/better-compute/commands/controlplane/internal/apierr"
	"github.com/better-compute/commands/controlplane/internal/errcode"
	"github.com/better-compute/commands/controlplane/server/servertest"
	agentv1 "github.com/better-compute/commands/proto/bc/agent/v1"
	apiv1 "github.com/better-compute/commands/proto/bc/api/v1"
)

func as(token string) context.Context {
	return metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+token)
}

// nodes.createJoinToken: compute:nodes:admin on the node; the token joins
// the node once, with the role and allowed kinds it was made for.
func TestCreateJoinTokenThroughTheAPI(t *testing.T) {
	t.Parallel()
	r := servertest.Start(t, nil)
	nodes := apiv1.NewNodesClient(dial(t, r.GRPC))
	req := &apiv1.CreateJoinTokenRequest{TenantId: servertest.TenantA, NodeId: servertest.NodeA1, Role: "discovery",
		AllowedKinds: []string{"inventory.refresh"}, TtlSeconds: 600}

	_, err := nodes.CreateJoinToken(as(servertest.TokRead), req)
	require.Equal(t, errcode.PermissionDenied, apierr.CodeOf(err), "%v", err)
	_, err = nodes.CreateJoinToken(as(servertest.TokOther), req)
	require.Equal(t, errcode.NotFound, apierr.CodeOf(err), "another tenant's node is NOT_FOUND, never PERMISSION_DENIED")
	_, err = nodes.CreateJoinToken(as(servertest.TokOps), &apiv1.CreateJoinTokenRequest{TenantId: servertest.TenantA,
		NodeId: servertest.NodeA1, TtlSeconds: 8 * 24 * 3600})
	require.Equal(t, errcode.InvalidInput, apierr.CodeOf(err), "%v", err)

	tok, err := nodes.CreateJoinToken(as(servertest.TokOps), req)
	require.NoError(t, err)
	require.Equal(t, servertest.NodeA1, tok.GetNodeId())
	require.True(t, tok.GetExpiresAt().IsValid())

	_, csr, err := trust.NewKeyAndCSR(servertest.NodeA1)
	require.NoError(t, err)
	resp, err := agentv1.NewJoinClient(noCertConn(t, r)).Join(context.Background(), &agentv1.JoinRequest{Token: tok.GetToken(), Csr: csr})
	require.NoError(t, err)
	cert, err := trust.ParseCertPEM(resp.GetCertificate())
	require.NoError(t, err)
	id, err := trust.IdentityOf(cert)
	require.NoError(t, err)
	require.Equal(t, trust.Identity{NodeID: servertest.NodeA1, Role: "discovery", AllowedKinds: []string{"inventory.refresh"}}, id)
	_, err = cert.Verify(x509VerifyOptions(r))
	require.NoError(t, err)

	// The restricted identity is recorded on the node.
	n, err := nodes.Get(as(servertest.TokOps), &apiv1.GetNodeRequest{TenantId: servertest.TenantA, NodeId: servertest.NodeA1})
	require.NoError(t, err)
	require.Equal(t, []string{"inventory.refresh"}, n.GetAllowedKinds())
}

// nodes.setSpec and nodes.getSpec: each set is the next generation; a spec
// that does not validate is INVALID_INPUT.
func TestSetAndGetNodeSpec(t *testing.T) {
	t.Parallel()
	r := servertest.Start(t, nil)
	nodes := apiv1.NewNodesClient(dial(t, r.GRPC))
	get := func() *apiv1.NodeSpec {
		s, err := nodes.GetSpec(as(servertest.TokRead), &apiv1.GetNodeSpecRequest{TenantId: servertest.TenantA, NodeId: servertest.NodeA1})
		require.NoError(t, err)
		return s
	}
	require.Zero(t, get().GetGeneration())

	spec, err := structpb.NewStruct(map[string]any{"holds": []any{map[string]any{"gpu": "GPU-1", "state": "live"}}})
	require.NoError(t, err)
	set := &apiv1.SetNodeSpecRequest{TenantId: servertest.TenantA, NodeId: servertest.NodeA1, Spec: spec}
	_, err = nodes.SetSpec(as(servertest.TokRead), set)
	require.Equal(t, errcode.PermissionDenied, apierr.CodeOf(err))
	_, err = nodes.SetSpec(as(servertest.TokOther), set)
	require.Equal(t, errcode.NotFound, apierr.CodeOf(err))

	g1, err := nodes.SetSpec(as(servertest.TokOps), set)
	require.NoError(t, err)
	require.EqualValues(t, 1, g1.GetGeneration())
	g2, err := nodes.SetSpec(as(servertest.TokOps), set)
	require.NoError(t, err)
	require.EqualValues(t, 2, g2.GetGeneration())
	got := get()
	require.EqualValues(t, 2, got.GetGeneration())
	require.Equal(t, "GPU-1", got.GetSpec().GetFields()["holds"].GetListValue().GetValues()[0].GetStructValue().GetFields()["gpu"].GetStringValue())

	bad, err := structpb.NewStruct(map[string]any{"holds": []any{map[string]any{"gpu": "GPU-1", "state": "maybe"}}})
	require.NoError(t, err)
	_, err = nodes.SetSpec(as(servertest.TokOps), &apiv1.SetNodeSpecRequest{TenantId: servertest.TenantA, NodeId: servertest.NodeA1, Spec: bad})
	require.Equal(t, errcode.InvalidInput, apierr.CodeOf(err), "%v", err)
	require.EqualValues(t, 2, get().GetGeneration())
}
