package api_test

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/controlplane/internal/errcode"
	apiv1 "github.com/better-compute/commands/proto/bc/api/v1"
)

func TestNodesAdminAndGet(t *testing.T) {
	t.Parallel()
	b := setup(t)
	nodes := apiv1.NewNodesClient(b.conn)
	tn, err := nodes.CreateTenant(as(tokAdmin), &apiv1.CreateTenantRequest{Name: "Acme"})
	require.NoError(t, err)
	require.Regexp(t, "^tenant_", tn.GetId())
	_, err = nodes.CreateTenant(as(tokOps), &apiv1.CreateTenantRequest{TenantId: tenantA})
	requireCode(t, err, errcode.PermissionDenied)
	_, err = nodes.CreateTenant(as(tokAdmin), &apiv1.CreateTenantRequest{TenantId: tenantA})
	requireCode(t, err, errcode.Conflict)

	n, err := nodes.Create(as(tokAdmin), &apiv1.CreateNodeRequest{TenantId: tn.GetId()})
	require.NoError(t, err)
	require.Regexp(t, "^node_", n.GetId())
	require.Equal(t, "node", n.GetRole())
	_, err = nodes.Create(as(tokReader), &apiv1.CreateNodeRequest{TenantId: tenantA})
	requireCode(t, err, errcode.PermissionDenied)

	_, err = b.pool.Exec(context.Background(), `UPDATE nodes SET inventory = '{"gpus":[{"uuid":"GPU-1"}]}',
		conditions = '[{"type":"RebootRequired","status":"True","reason":"kernel-update","since":"2026-01-02T03:04:05Z"}]' WHERE id = $1`, nodeA1)
	require.NoError(t, err)
	got, err := nodes.Get(as(tokReader), &apiv1.GetNodeRequest{TenantId: tenantA, NodeId: nodeA1})
	require.NoError(t, err)
	require.Equal(t, "GPU-1", got.GetInventory().GetFields()["gpus"].GetListValue().GetValues()[0].GetStructValue().GetFields()["uuid"].GetStringValue())
	require.Len(t, got.GetConditions(), 1)
	require.Equal(t, "RebootRequired", got.GetConditions()[0].GetType())
	require.Equal(t, "kernel-update", got.GetConditions()[0].GetReason())
}

// nodes.create with an id another tenant's node has says nothing about that
// node: the answer is the one a deleted node's id gets, node-id-unavailable,
// which names no tenant and does not say whether the node is live. Only a
// live node of the caller's own tenant is node-exists.
func TestCreateNodeRevealsNoOtherTenantsNode(t *testing.T) {
	t.Parallel()
	b := setup(t)
	nodes := apiv1.NewNodesClient(b.conn)
	other, err := nodes.Create(as(tokOther), &apiv1.CreateNodeRequest{TenantId: tenantB, NodeId: nodeA1})
	in := requireCode(t, err, errcode.Conflict)
	require.Equal(t, "node-id-unavailable", in.Details["reason"])
	require.NotContains(t, in.Message, tenantA)
	require.NotContains(t, in.Message, "exists")
	require.Nil(t, other)

	// A deleted node's id gets the very same answer, message and details.
	_, err = nodes.Create(as(tokAdmin), &apiv1.CreateNodeRequest{TenantId: tenantB, NodeId: "node_b9"})
	require.NoError(t, err)
	_, err = nodes.Delete(as(tokAdmin), &apiv1.DeleteNodeRequest{TenantId: tenantB, NodeId: "node_b9"})
	require.NoError(t, err)
	_, err = nodes.Create(as(tokOther), &apiv1.CreateNodeRequest{TenantId: tenantB, NodeId: "node_b9"})
	deleted := requireCode(t, err, errcode.Conflict)
	cross := in
	cross.Message = strings.ReplaceAll(cross.Message, nodeA1, "node_b9")
	cross.Details = map[string]string{"reason": cross.Details["reason"], "nodeId": "node_b9"}
	require.Equal(t, cross, deleted)

	// The caller's own live node is node-exists.
	_, err = nodes.Create(as(tokOps), &apiv1.CreateNodeRequest{TenantId: tenantA, NodeId: nodeA1})
	in = requireCode(t, err, errcode.Conflict)
	require.Equal(t, "node-exists", in.Details["reason"])
}
