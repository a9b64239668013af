package queue_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/controlplane/commands/events"
	"github.com/better-compute/commands/controlplane/commands/queue"
	"github.com/better-compute/commands/controlplane/internal/errcode"
	"github.com/better-compute/commands/controlplane/internal/pgtx"
	"github.com/better-compute/commands/controlplane/trust/signing"
	"github.com/better-compute/commands/internal/testutil"
	"github.com/better-compute/commands/internal/trust"
)

func (b *bundle) enqueueSet(t *testing.T, ps ...queue.EnqueueParams) []queue.EnqueueOutcome {
	t.Helper()
	return committed(t, b, len(ps), func(tx pgx.Tx) ([]queue.EnqueueOutcome, error) { return b.q.EnqueueSet(b.ctx, tx, ps) })
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
	requireCode(t, out[2].Err, errcode.InvalidInput)
	requireCode(t, out[4].Err, errcode.Unsupported)
	requireCode(t, out[5].Err, errcode.NotFound)
	requireCode(t, out[6].Err, errcode.InvalidState)
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
	requireCode(t, out[3].Err, errcode.Conflict)
	require.Equal(t, int64(2), out[1].Command.Seq)
	next, _ := b.enqueue(t, b.params("k3"))
	require.Equal(t, int64(3), next.Seq, "duplicates left no gap")
}

// With the transaction's Final (commands.run's group), EnqueueSet's insert
// travels with COMMIT, so a key that another transaction queued after the
// duplicates were read cannot become a duplicate there: the insert waits
// for that transaction, then fails (unique_violation) and nothing is
// committed, no seq taken. The same set run again without the Final (as the
// group then runs each caller alone) answers it as the duplicate it is.
func TestEnqueueSetWithCommitRefusesAKeyQueuedMeanwhile(t *testing.T) {
	b := setup(t)
	other, err := b.pool.Begin(b.ctx)
	require.NoError(t, err)
	defer func() { _ = other.Rollback(b.ctx) }()
	first, dup, err := b.q.Enqueue(b.ctx, other, b.params("k-race"))
	require.NoError(t, err)
	require.False(t, dup)

	done := make(chan error, 1)
	var fin *pgtx.Final
	go func() {
		tx, release, err := pgtx.Begin(b.ctx, b.pool)
		if err != nil {
			done <- err
			return
		}
		defer release()
		defer func() { _ = tx.Rollback(b.ctx) }()
		var fctx context.Context
		fctx, fin = pgtx.WithFinal(b.ctx)
		_, err = b.q.EnqueueSet(fctx, tx, []queue.EnqueueParams{b.params("k-race")})
		done <- err
	}()
	// The set read no duplicate and waits for the node's row, which other
	// holds (its seq); once other commits, the set's insert meets its key.
	testutil.WaitFor(t, 10*time.Second, "the set to wait for the other transaction", func() bool {
		var n int
		require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE wait_event_type = 'Lock' AND datname = current_database()`).Scan(&n))
		return n == 1
	})
	require.NoError(t, other.Commit(b.ctx))
	err = <-done
	var pe *pgconn.PgError
	require.ErrorAs(t, err, &pe)
	require.Equal(t, "23505", pe.Code)
	require.True(t, fin.Failed(), "nothing committed")

	out := b.enqueueSet(t, b.params("k-race"))
	require.True(t, out[0].Duplicate)
	require.Equal(t, first.ID, out[0].Command.ID)
	next, _ := b.enqueue(t, b.params("k-next"))
	require.Equal(t, first.Seq+1, next.Seq, "the refused set took no seq")
}

// EnqueueSet answers each new command as reading its row back would: the
// insert returns only the ids it stored, and the rest is what the statement
// was given or a column's default, so the two must not drift apart (a
// column added with a default, a flag the row keeps). Signed, with every
// optional field set, for each kind's flags.
func TestEnqueueSetReturnsTheCommandAsItsRowReads(t *testing.T) {
	b := setup(t)
	_, root, err := trust.NewEd25519()
	require.NoError(t, err)
	signer, err := signing.New(root, signing.Options{})
	require.NoError(t, err)
	b.q.SetSigner(signer)
	later := time.Now().Add(time.Minute)
	full := b.params("full")
	full.NotBefore = &later
	full.MinGeneration = 3
	full.BundleKey = "bundles/x"
	full.TraceParent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	full.AwaitingApproval = true
	reboot := b.params("reboot")
	reboot.Kind, reboot.Payload = rebootKind.Kind, nil
	bare := b.params("")
	bare.NotAfter = time.Time{} // the default deadline
	out := b.enqueueSet(t, full, reboot, bare)
	for i, o := range out {
		require.NoError(t, o.Err, "item %d", i)
		got, err := b.q.Get(b.ctx, b.pool, o.Command.NodeID, o.Command.ID)
		require.NoError(t, err)
		require.NotEmpty(t, got.Signature, "item %d", i)
		require.Equal(t, got, o.Command, "item %d: as its row reads", i)
	}
}
