package queue_test

import (
	"encoding/json"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/controlplane/events"
	"github.com/better-compute/commands/controlplane/queue"
)

func (b *bundle) enqueueSet(t *testing.T, ps ...queue.EnqueueParams) []queue.EnqueueOutcome {
	t.Helper()
	var out []queue.EnqueueOutcome
	require.NoError(t, pgx.BeginFunc(b.ctx, b.pool, func(tx pgx.Tx) error {
		var err error
		out, err = b.q.EnqueueSet(b.ctx, tx, ps)
		return err
	}))
	require.Len(t, out, len(ps))
	return out
}

// EnqueueSet is Enqueue for many commands at once: each gets the next seq
// of its node in order ("seq is gapless per node"), its bytes are exactly
// what its row holds (so a signature over them verifies against the
// columns), each publishes node.command.queued, and an item's own error
// (unknown kind, payload refused, node not found, the role) leaves the
// others queued.
func TestEnqueueSetQueuesEachAsEnqueueWould(t *testing.T) {
	b := setup(t)
	other, err := b.q.CreateNode(b.ctx, b.pool, queue.Node{TenantID: b.tenant.ID})
	require.NoError(t, err)
	on := func(p queue.EnqueueParams, node string) queue.EnqueueParams { p.NodeID = node; return p }
	bad := b.params("bad-payload")
	bad.Payload = json.RawMessage(`{"sections":["cpus"]}`)
	unknown := b.params("unknown-kind")
	unknown.Kind = "test.nope"
	wrongRole := b.params("role")
	wrongRole.Kind = wipeKind.Kind // runs on discovery agents only
	spaced := b.params("spaced")
	spaced.Payload = json.RawMessage(`{ "rescan" : true, "sections" : [ "gpus" ] }`)

	out := b.enqueueSet(t,
		b.params("a1"),
		on(b.params("b1"), other.ID),
		bad,
		b.params("a2"),
		unknown,
		on(b.params("ghost"), "node_missing"),
		wrongRole,
		spaced,
		on(b.params("b2"), other.ID),
	)
	seqs := map[string][]int64{}
	for _, i := range []int{0, 1, 3, 7, 8} {
		require.NoError(t, out[i].Err, "item %d", i)
		require.False(t, out[i].Duplicate)
		c := out[i].Command
		seqs[c.NodeID] = append(seqs[c.NodeID], c.Seq)
		got, err := b.q.Get(b.ctx, b.pool, c.NodeID, c.ID)
		require.NoError(t, err)
		require.Equal(t, got.CommandBytes, c.CommandBytes)
		again, err := queue.MarshalCommand(got)
		require.NoError(t, err)
		require.Equal(t, again, got.CommandBytes, "item %d: the stored bytes are the stored columns'", i)
	}
	require.Equal(t, []int64{1, 2, 3}, seqs[b.node.ID], "in item order, gapless")
	require.Equal(t, []int64{1, 2}, seqs[other.ID])
	requireCode(t, out[2].Err, queue.InvalidInput)
	requireCode(t, out[4].Err, queue.Unsupported)
	requireCode(t, out[5].Err, queue.NotFound)
	requireCode(t, out[6].Err, queue.InvalidState)
	require.Len(t, b.outbox(t, events.TopicCommandQueued), 5)

	next, _ := b.enqueue(t, b.params("after"))
	require.Equal(t, int64(4), next.Seq, "refused items took no seq")
}

// "a repeat returns the first command": a key already queued, and the same
// key twice in one set, come back as the first command, Duplicate set; the
// same key for another kind is CONFLICT; none of them takes a seq.
func TestEnqueueSetKeepsIdempotency(t *testing.T) {
	b := setup(t)
	first, _ := b.enqueue(t, b.params("k1"))
	reboot := b.params("k1")
	reboot.Kind = rebootKind.Kind
	reboot.Payload = nil
	out := b.enqueueSet(t, b.params("k1"), b.params("k2"), b.params("k2"), reboot)
	require.True(t, out[0].Duplicate)
	require.Equal(t, first.ID, out[0].Command.ID)
	require.False(t, out[1].Duplicate)
	require.True(t, out[2].Duplicate, "the same key twice in one set")
	require.Equal(t, out[1].Command.ID, out[2].Command.ID)
	requireCode(t, out[3].Err, queue.Conflict)
	require.Equal(t, int64(2), out[1].Command.Seq)
	next, _ := b.enqueue(t, b.params("k3"))
	require.Equal(t, int64(3), next.Seq, "duplicates left no gap")
}
