package api_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/controlplane/commands/queue"
	"github.com/better-compute/commands/controlplane/internal/errcode"
	apiv1 "github.com/better-compute/commands/proto/bc/api/v1"
)

// nodes.delete: "Deleting a node cancels its pending commands with reason
// node-deleted", and its in-flight ones the same way, each with one
// command.settled; the node is NOT_FOUND afterwards, while its commands'
// history still reads. It needs compute:nodes:admin, and another tenant's
// node is NOT_FOUND.
func TestDeleteNodeCancelsItsCommandsAndIsNotFoundAfter(t *testing.T) {
	t.Parallel()
	b := setup(t)
	nodes := apiv1.NewNodesClient(b.conn)
	pending, err := b.run(t, tokOps, &apiv1.RunCommandRequest{TenantId: tenantA, NodeId: nodeA1, Kind: "diag.nvml"})
	require.NoError(t, err)
	running, err := b.run(t, tokOps, &apiv1.RunCommandRequest{TenantId: tenantA, NodeId: nodeA1, Kind: "inventory.refresh"})
	require.NoError(t, err)
	b.setState(t, running.GetId(), queue.Running)
	acked, err := b.run(t, tokOps, &apiv1.RunCommandRequest{TenantId: tenantA, NodeId: nodeA1, Kind: "diag.nvml"})
	require.NoError(t, err)
	b.setState(t, acked.GetId(), queue.Acked)
	other, err := b.run(t, tokOps, &apiv1.RunCommandRequest{TenantId: tenantA, NodeId: nodeA2, Kind: "diag.nvml"})
	require.NoError(t, err)

	req := &apiv1.DeleteNodeRequest{TenantId: tenantA, NodeId: nodeA1}
	_, err = nodes.Delete(as(tokReader), req)
	requireCode(t, err, errcode.PermissionDenied)
	_, err = nodes.Delete(as(tokOther), &apiv1.DeleteNodeRequest{TenantId: tenantB, NodeId: nodeA1})
	requireCode(t, err, errcode.NotFound)
	_, err = nodes.Delete(as(tokOther), req)
	requireCode(t, err, errcode.NotFound)

	out, err := nodes.Delete(as(tokOps), req)
	require.NoError(t, err)
	require.Equal(t, nodeA1, out.GetNodeId())
	require.EqualValues(t, 3, out.GetCancelledCommands())

	for _, c := range []*apiv1.Command{pending, running, acked} {
		got, err := b.commands().Get(as(tokReader), &apiv1.GetCommandRequest{TenantId: tenantA, NodeId: nodeA1, CommandId: c.GetId()})
		require.NoError(t, err, "a deleted node's commands still read")
		require.Equal(t, "cancelled", got.GetState())
		require.Equal(t, "node-deleted", got.GetReason())
		require.True(t, got.GetSettledAt().IsValid())
	}
	list, err := b.commands().List(as(tokReader), &apiv1.ListCommandsRequest{TenantId: tenantA, NodeId: nodeA1})
	require.NoError(t, err)
	require.Len(t, list.GetItems(), 3, "a deleted node still lists its history")
	got, err := b.commands().Get(as(tokReader), &apiv1.GetCommandRequest{TenantId: tenantA, NodeId: nodeA2, CommandId: other.GetId()})
	require.NoError(t, err)
	require.Equal(t, "pending", got.GetState(), "another node's commands are untouched")

	rows, err := b.pool.Query(context.Background(), `SELECT payload FROM outbox WHERE topic = 'command.settled' ORDER BY id`)
	require.NoError(t, err)
	settled := map[string]int{}
	for rows.Next() {
		var p struct{ CommandID, State, Reason string }
		var raw []byte
		require.NoError(t, rows.Scan(&raw))
		require.NoError(t, json.Unmarshal(raw, &p))
		require.Equal(t, "cancelled/node-deleted", p.State+"/"+p.Reason)
		settled[p.CommandID]++
	}
	require.NoError(t, rows.Err())
	require.Equal(t, map[string]int{pending.GetId(): 1, running.GetId(): 1, acked.GetId(): 1}, settled, "command.settled once each")

	_, err = nodes.Get(as(tokOps), &apiv1.GetNodeRequest{TenantId: tenantA, NodeId: nodeA1})
	requireCode(t, err, errcode.NotFound)
	_, err = b.run(t, tokOps, &apiv1.RunCommandRequest{TenantId: tenantA, NodeId: nodeA1, Kind: "diag.nvml"})
	requireCode(t, err, errcode.NotFound)
	_, err = nodes.SetSpec(as(tokOps), &apiv1.SetNodeSpecRequest{TenantId: tenantA, NodeId: nodeA1, Spec: nil})
	requireCode(t, err, errcode.NotFound)
	_, err = nodes.Delete(as(tokOps), req)
	requireCode(t, err, errcode.NotFound)
}
