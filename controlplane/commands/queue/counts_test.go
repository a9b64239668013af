package queue_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/controlplane/commands/queue"
)

// The overview's failures since a time, narrowed by the caller's node
// patterns.
func TestCountsAndSignedBytesAreReadFromTheQueue(t *testing.T) {
	b := setup(t)
	before := time.Now().Add(-time.Minute)
	b.enqueue(t, b.params("pending"))
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
}
