package api_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/controlplane/commands/queue"
	"github.com/better-compute/commands/controlplane/internal/errcode"
	apiv1 "github.com/better-compute/commands/proto/bc/api/v1"
)

// Issue 31: "commands.run refuses, with INVALID_STATE naming the leaf and
// the command that used it, a command on a leaf that already has one."
// Before, the API accepted it and the node rejected it later
// (BATCH_UNAPPROVED, "leaf 0 … ran cmd_…"). A retry with the same
// idempotency key still answers the command it queued, and a leaf whose
// command never left the control plane (cancelled while pending) is free
// again.
func TestRun_ABatchLeafTakesOneCommand(t *testing.T) {
	t.Parallel()
	b := setup(t)
	batch, err := apiv1.NewCommandBatchesClient(b.conn).Create(as(tokAdmin), &apiv1.CreateCommandBatchRequest{
		TenantId: tenantA, Reason: "rolling reboot", IdempotencyKey: "leaf-test",
		Scope: []*apiv1.BatchLeaf{{Subject: nodeA1, Kind: "node.reboot"}, {Subject: nodeA2, Kind: "node.reboot"}},
	})
	require.NoError(t, err)
	run := func(node, key string) (*apiv1.Command, error) {
		return b.run(t, tokAdmin, &apiv1.RunCommandRequest{TenantId: tenantA, NodeId: node, Kind: "node.reboot", BatchId: batch.GetId(), IdempotencyKey: key})
	}
	first, err := run(nodeA1, "reboot-a1")
	require.NoError(t, err)

	again, err := run(nodeA1, "reboot-a1")
	require.NoError(t, err, "an idempotent retry is not a second command on the leaf")
	require.Equal(t, first.GetId(), again.GetId())

	for _, key := range []string{"reboot-a1-again", ""} {
		_, err = run(nodeA1, key)
		in := requireCode(t, err, errcode.InvalidState)
		require.Equal(t, "batch-leaf-used", in.Details["reason"])
		require.Equal(t, "0", in.Details["leafIndex"])
		require.Equal(t, first.GetId(), in.Details["commandId"])
		require.Equal(t, batch.GetId(), in.Details["batchId"])
		require.Contains(t, in.Message, "leaf 0 ("+nodeA1+", node.reboot) already has command "+first.GetId())
	}

	// The other leaf is free.
	other, err := run(nodeA2, "reboot-a2")
	require.NoError(t, err)
	require.NotEqual(t, first.GetId(), other.GetId())

	// A command that went out holds its leaf whatever became of it; one
	// cancelled before it was ever dispatched consumed nothing on the node.
	cancelled, err := b.commands().Cancel(as(tokAdmin), &apiv1.CancelCommandRequest{TenantId: tenantA, NodeId: nodeA1, CommandId: first.GetId()})
	require.NoError(t, err)
	require.Equal(t, "cancelled", cancelled.GetState())
	next, err := run(nodeA1, "reboot-a1-after-cancel")
	require.NoError(t, err, "the leaf of a command cancelled while pending is free")
	b.setState(t, next.GetId(), queue.Dispatched)
	b.setState(t, next.GetId(), queue.Cancelled)
	_, err = run(nodeA1, "reboot-a1-third")
	in := requireCode(t, err, errcode.InvalidState)
	require.Equal(t, next.GetId(), in.Details["commandId"], "a dispatched command holds its leaf")
}
