package queue_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/controlplane/commands/queue"
	"github.com/better-compute/commands/controlplane/internal/errcode"
	"github.com/better-compute/commands/controlplane/internal/pgtx"
)

func (b *bundle) transitionSet(t *testing.T, ts ...queue.Transition) []queue.TransitionResult {
	t.Helper()
	return committed(t, b, len(ts), func(tx pgx.Tx) ([]queue.TransitionResult, error) { return b.q.TransitionSet(b.ctx, tx, ts) })
}

// TransitionSet is Transition for many reports in one statement: each
// lands only when it ranks above the current state ("a late running after
// succeeded changes nothing"), only while its epoch is the node's session,
// only for its own node's command, and a settle publishes command.settled
// exactly once.
func TestTransitionSetKeepsEveryGuardOfTransition(t *testing.T) {
	b := setup(t)
	epoch, err := b.q.BeginSession(b.ctx, b.pool, b.node.ID)
	require.NoError(t, err)
	a, _ := b.enqueue(t, b.params("set-a"))
	c, _ := b.enqueue(t, b.params("set-c"))
	fenced, _ := b.enqueue(t, b.params("set-fenced"))
	other, err := b.q.CreateNode(b.ctx, b.pool, queue.Node{TenantID: b.tenant.ID})
	require.NoError(t, err)
	_, changed := b.transition(t, queue.Transition{CommandID: c.ID, To: queue.Succeeded})
	require.True(t, changed)

	out := b.transitionSet(t,
		queue.Transition{CommandID: a.ID, NodeID: b.node.ID, To: queue.Dispatched, Epoch: epoch, KindVersion: "1.0.0"},
		queue.Transition{CommandID: c.ID, NodeID: b.node.ID, To: queue.Running, Epoch: epoch},
		queue.Transition{CommandID: fenced.ID, NodeID: b.node.ID, To: queue.Dispatched, Epoch: epoch + 1},
		queue.Transition{CommandID: a.ID, NodeID: other.ID, To: queue.Failed},
		queue.Transition{CommandID: "cmd_missing", To: queue.Failed},
	)
	require.True(t, out[0].Found)
	require.True(t, out[0].Changed)
	require.Equal(t, queue.Dispatched, out[0].Command.State)
	require.Equal(t, epoch, out[0].Command.DispatchedEpoch)
	require.Equal(t, 1, out[0].Command.Attempts)
	require.Equal(t, "1.0.0", out[0].Command.KindVersion)
	require.True(t, out[1].Found)
	require.False(t, out[1].Changed, "a late running after succeeded changes nothing")
	require.Equal(t, queue.Succeeded, out[1].Command.State)
	require.True(t, out[2].Found)
	require.False(t, out[2].Changed, "a superseded session's report must not land")
	require.Equal(t, queue.Pending, out[2].Command.State)
	require.False(t, out[3].Found, "another node's command is not found")
	require.False(t, out[4].Found)
	got, err := b.q.Get(b.ctx, b.pool, b.node.ID, a.ID)
	require.NoError(t, err)
	require.Equal(t, queue.Dispatched, got.State, "another node's report changed nothing")

	out = b.transitionSet(t, queue.Transition{CommandID: a.ID, NodeID: b.node.ID, To: queue.Succeeded, Epoch: epoch, Reason: "ok",
		Result: json.RawMessage(`{"n":1}`), ResultSHA256: []byte{1, 2}, NodeSig: []byte{3}, ResultBytes: []byte(`{"n":1}`), Rebooted: true})
	require.True(t, out[0].Changed)
	cmd := out[0].Command
	require.Equal(t, queue.Succeeded, cmd.State)
	require.NotNil(t, cmd.SettledAt)
	require.JSONEq(t, `{"n":1}`, string(cmd.Result))
	require.Equal(t, []byte{1, 2}, cmd.ResultSHA256)
	require.Equal(t, []byte{3}, cmd.NodeSig)
	require.Equal(t, []byte(`{"n":1}`), cmd.ResultBytes)
	require.True(t, cmd.Rebooted)
	require.Equal(t, "ok", cmd.Reason)
	require.Len(t, b.outbox(t, "command.settled"), 2, "c and a, each exactly once")
}

// One command's reports in one call land in order, each its own statement:
// acked, running and succeeded all change it, and the settle is published
// once.
func TestTransitionSetLandsOneCommandsReportsInOrder(t *testing.T) {
	b := setup(t)
	c, _ := b.enqueue(t, b.params("set-order"))
	out := b.transitionSet(t,
		queue.Transition{CommandID: c.ID, To: queue.Acked},
		queue.Transition{CommandID: c.ID, To: queue.Running, Progress: json.RawMessage(`{"percent":50}`)},
		queue.Transition{CommandID: c.ID, To: queue.Succeeded},
		queue.Transition{CommandID: c.ID, To: queue.Failed},
	)
	for i, want := range []queue.State{queue.Acked, queue.Running, queue.Succeeded} {
		require.True(t, out[i].Changed, "report %d", i)
		require.Equal(t, want, out[i].Command.State)
	}
	require.False(t, out[3].Changed, "a terminal state never changes")
	require.Equal(t, queue.Succeeded, out[3].Command.State)
	require.JSONEq(t, `{"percent":50}`, string(out[2].Command.Progress))
	require.Len(t, b.outbox(t, "command.settled"), 1)
}

// "Every settle path calls the settle hook in its own transaction": the set
// tells the hook of what it settled, in the transaction that settled it, and
// the hook's error rolls the whole set back.
func TestTransitionSetCallsTheSettleHookInItsTransaction(t *testing.T) {
	b := setup(t)
	a, _ := b.enqueue(t, b.params("hook-a"))
	c, _ := b.enqueue(t, b.params("hook-c"))
	var seen []string
	b.q.OnSettle(func(ctx context.Context, tx pgx.Tx, settled []queue.Command) error {
		for _, s := range settled {
			// The hook sees the settle inside the transaction.
			var st string
			if err := tx.QueryRow(ctx, `SELECT state FROM commands WHERE id = $1`, s.ID).Scan(&st); err != nil {
				return err
			}
			seen = append(seen, s.ID+":"+st)
		}
		return nil
	})
	t.Cleanup(func() { b.q.OnSettle(nil) })
	b.transitionSet(t,
		queue.Transition{CommandID: a.ID, To: queue.Succeeded},
		queue.Transition{CommandID: c.ID, To: queue.Running},
	)
	require.Equal(t, []string{a.ID + ":succeeded"}, seen, "only what settled")

	b.q.OnSettle(func(context.Context, pgx.Tx, []queue.Command) error { return context.Canceled })
	err := pgx.BeginFunc(b.ctx, b.pool, func(tx pgx.Tx) error {
		_, err := b.q.TransitionSet(b.ctx, tx, []queue.Transition{{CommandID: c.ID, To: queue.Failed}})
		return err
	})
	require.ErrorIs(t, err, context.Canceled)
	got, err := b.q.Get(b.ctx, b.pool, b.node.ID, c.ID)
	require.NoError(t, err)
	require.Equal(t, queue.Running, got.State, "the hook's error rolled the settle back")
}

// An invalid target fails the call before anything is sent.
func TestTransitionSetRefusesPending(t *testing.T) {
	b := setup(t)
	c, _ := b.enqueue(t, b.params("set-pending"))
	err := pgx.BeginFunc(b.ctx, b.pool, func(tx pgx.Tx) error {
		_, err := b.q.TransitionSet(b.ctx, tx, []queue.Transition{{CommandID: c.ID, To: queue.Acked}, {CommandID: c.ID, To: queue.Pending}})
		return err
	})
	requireCode(t, err, errcode.InvalidInput)
	got, err := b.q.Get(b.ctx, b.pool, b.node.ID, c.ID)
	require.NoError(t, err)
	require.Equal(t, queue.Pending, got.State)
}

// The settle hook runs in the transaction, before its COMMIT: a set whose
// last statement could carry the group's COMMIT (pgtx.Final) keeps it back
// when an earlier statement of the set settled a command, though the last
// one settles nothing.
func TestTransitionSetLeavesTheCommitForTheHookOfAnEarlierSettle(t *testing.T) {
	b := setup(t)
	a, _ := b.enqueue(t, b.params("hook-early-a"))
	c, _ := b.enqueue(t, b.params("hook-early-c"))
	var seen []string
	b.q.OnSettle(func(ctx context.Context, tx pgx.Tx, settled []queue.Command) error {
		for _, s := range settled {
			var st string
			if err := tx.QueryRow(ctx, `SELECT state FROM commands WHERE id = $1`, s.ID).Scan(&st); err != nil {
				return err
			}
			seen = append(seen, s.ID+":"+st)
		}
		return nil
	})
	t.Cleanup(func() { b.q.OnSettle(nil) })
	tx, release, err := pgtx.Begin(b.ctx, b.pool)
	require.NoError(t, err)
	defer release()
	defer func() { _ = tx.Rollback(b.ctx) }()
	fctx, fin := pgtx.WithFinal(b.ctx)
	// Two statements: a settles in the first, c's second report is alone
	// in the last.
	_, err = b.q.TransitionSet(fctx, tx, []queue.Transition{
		{CommandID: a.ID, To: queue.Succeeded},
		{CommandID: c.ID, To: queue.Acked},
		{CommandID: c.ID, To: queue.Running},
	})
	require.NoError(t, err)
	require.False(t, fin.Sent(), "COMMIT is left to the transaction's owner, after the hook")
	require.Equal(t, []string{a.ID + ":succeeded"}, seen)
	require.NoError(t, tx.Commit(b.ctx))
}
