package queue_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/controlplane/commands/queue"
	"github.com/better-compute/commands/controlplane/internal/errcode"
)

// The queue's reads for other rooms: the overview's failures since a time
// (narrowed by the caller's node patterns), the pending count by lane, and
// what a node's secret exchange reads of its own command.
func TestCountsAndSignedBytesAreReadFromTheQueue(t *testing.T) {
	b := setup(t)
	before := time.Now().Add(-time.Minute)
	pending, _ := b.enqueue(t, b.params("pending"))
	failed, _ := b.enqueue(t, b.params("failed"))
	b.transition(t, queue.Transition{CommandID: failed.ID, To: queue.Failed, Reason: "timeout"})

	n, err := queue.CountFailedSince(b.ctx, b.pool, b.tenant.ID, before, nil)
	require.NoError(t, err)
	require.Equal(t, int64(1), n)
	n, err = queue.CountFailedSince(b.ctx, b.pool, b.tenant.ID, time.Now().Add(time.Minute), nil)
	require.NoError(t, err)
	require.Zero(t, n, "settled before since")
	n, err = queue.CountFailedSince(b.ctx, b.pool, b.tenant.ID, before, []string{"compute-node/none"})
	require.NoError(t, err)
	require.Zero(t, n, "on no node the patterns match")

	lanes, err := queue.PendingByLane(b.ctx, b.pool)
	require.NoError(t, err)
	require.Equal(t, map[string]int64{"control": 1}, lanes)

	s, err := queue.SignedOf(b.ctx, b.pool, b.node.ID, pending.ID)
	require.NoError(t, err)
	require.Equal(t, b.tenant.ID, s.TenantID)
	require.Equal(t, queue.Pending, s.State)
	require.NotEmpty(t, s.Bytes)
	_, err = queue.SignedOf(b.ctx, b.pool, "node_other", pending.ID)
	require.Equal(t, errcode.NotFound, errcode.CodeOf(err), "another node's command")
}
