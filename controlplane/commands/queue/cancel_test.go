package queue_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/controlplane/commands/events"
	"github.com/better-compute/commands/controlplane/commands/queue"
	"github.com/better-compute/commands/controlplane/internal/errcode"
	"github.com/better-compute/commands/controlplane/internal/ids"
)

// "a pending command becomes cancelled at once and never runs", and
// commands.cancel publishes node.command.cancel-requested with state cancelled.
func TestCancelPending(t *testing.T) {
	b := setup(t)
	cmd, _ := b.enqueue(t, b.params("k"))
	got, err := b.cancel(t, b.node.ID, cmd.ID)
	require.NoError(t, err)
	require.Equal(t, queue.Cancelled, got.State)
	require.Equal(t, queue.ReasonCancelled, got.Reason)
	require.NotNil(t, got.SettledAt)
	require.Equal(t, []map[string]any{{"nodeId": b.node.ID, "commandId": cmd.ID, "kind": "test.refresh", "state": "cancelled"}},
		b.outbox(t, events.TopicCommandCancelRequested))
	require.Equal(t, []map[string]any{{"commandId": cmd.ID, "nodeId": b.node.ID, "kind": "test.refresh", "state": "cancelled", "reason": "cancelled"}},
		b.outbox(t, events.TopicCommandSettled))

	// It never runs: a late dispatch changes nothing.
	after, changed := b.transition(t, queue.Transition{CommandID: cmd.ID, To: queue.Dispatched})
	require.False(t, changed)
	require.Equal(t, queue.Cancelled, after.State)
	open, err := b.q.ListOpen(b.ctx, b.pool, b.node.ID)
	require.NoError(t, err)
	require.Empty(t, open)
}

// "an in-flight command keeps its state and is marked cancel_requested_at";
// the event carries the in-flight state, once.
func TestCancelInFlight(t *testing.T) {
	for _, st := range []queue.State{queue.Dispatched, queue.Acked, queue.Running} {
		t.Run(string(st), func(t *testing.T) {
			b := setup(t)
			cmd, _ := b.enqueue(t, b.params("k"))
			_, changed := b.transition(t, queue.Transition{CommandID: cmd.ID, To: st})
			require.True(t, changed)

			got, err := b.cancel(t, b.node.ID, cmd.ID)
			require.NoError(t, err)
			require.Equal(t, st, got.State)
			require.NotNil(t, got.CancelRequestedAt)
			require.Nil(t, got.SettledAt)
			want := []map[string]any{{"nodeId": b.node.ID, "commandId": cmd.ID, "kind": "test.refresh", "state": string(st)}}
			require.Equal(t, want, b.outbox(t, events.TopicCommandCancelRequested))

			// Asking again changes nothing and publishes nothing new.
			again, err := b.cancel(t, "", cmd.ID)
			require.NoError(t, err)
			require.Equal(t, got.CancelRequestedAt.UnixMicro(), again.CancelRequestedAt.UnixMicro())
			require.Equal(t, want, b.outbox(t, events.TopicCommandCancelRequested))
			require.Empty(t, b.outbox(t, events.TopicCommandSettled))

			// "The daemon stops between actions and reports the real outcome".
			final, changed := b.transition(t, queue.Transition{CommandID: cmd.ID, To: queue.Succeeded})
			require.True(t, changed)
			require.Equal(t, queue.Succeeded, final.State)
		})
	}
}

// "a terminal command is returned unchanged; an unknown id (or a node your
// tenant cannot see) is NOT_FOUND".
func TestCancelTerminalAndUnknown(t *testing.T) {
	b := setup(t)
	cmd, _ := b.enqueue(t, b.params("k"))
	done, _ := b.transition(t, queue.Transition{CommandID: cmd.ID, To: queue.Failed, Reason: "timeout"})
	got, err := b.cancel(t, b.node.ID, cmd.ID)
	require.NoError(t, err)
	require.Equal(t, queue.Failed, got.State)
	require.Equal(t, "timeout", got.Reason)
	require.Nil(t, got.CancelRequestedAt)
	require.Equal(t, done.UpdatedAt, got.UpdatedAt)
	require.Empty(t, b.outbox(t, events.TopicCommandCancelRequested))

	_, err = b.cancel(t, b.node.ID, ids.NewCommand())
	requireCode(t, err, errcode.NotFound)

	other, err := b.q.CreateNode(b.ctx, b.pool, queue.Node{TenantID: b.tenant.ID})
	require.NoError(t, err)
	_, err = b.cancel(t, other.ID, cmd.ID)
	requireCode(t, err, errcode.NotFound)
}

// "Deleting a node cancels its pending commands with reason node-deleted."
// In-flight ones are cancelled the same way: a deleted node never reports
// again, so waiting for the sweeper would leave them open for up to
// not_after plus the kind's timeout. Each publishes command.settled once,
// terminal ones are left alone, and the deletion is announced on
// bc_node_deleted for the gateways that hold the node's sessions.
func TestDeleteNodeCancelsPendingAndInFlight(t *testing.T) {
	b := setup(t)
	pending, _ := b.enqueue(t, b.params("a"))
	running, _ := b.enqueue(t, b.params("b"))
	b.transition(t, queue.Transition{CommandID: running.ID, To: queue.Running})
	dispatched, _ := b.enqueue(t, b.params("c"))
	b.transition(t, queue.Transition{CommandID: dispatched.ID, To: queue.Dispatched})
	done, _ := b.enqueue(t, b.params("d"))
	b.transition(t, queue.Transition{CommandID: done.ID, To: queue.Succeeded})
	settledBefore := len(b.outbox(t, events.TopicCommandSettled))

	conn, err := b.pool.Acquire(b.ctx)
	require.NoError(t, err)
	defer conn.Release()
	require.NoError(t, queue.ListenNodeDeleted(b.ctx, conn.Conn()))

	var cancelled int64
	require.NoError(t, pgx.BeginFunc(b.ctx, b.pool, func(tx pgx.Tx) error {
		var err error
		cancelled, err = b.q.DeleteNode(b.ctx, tx, b.node.ID)
		return err
	}))
	require.Equal(t, int64(3), cancelled)

	for _, c := range []queue.Command{pending, running, dispatched} {
		got, err := b.q.Get(b.ctx, b.pool, b.node.ID, c.ID)
		require.NoError(t, err)
		require.Equal(t, queue.Cancelled, got.State, c.ID)
		require.Equal(t, queue.ReasonNodeDeleted, got.Reason)
		require.NotNil(t, got.SettledAt)
	}
	got, err := b.q.Get(b.ctx, b.pool, b.node.ID, done.ID)
	require.NoError(t, err)
	require.Equal(t, queue.Succeeded, got.State, "a terminal command is left alone")
	settled := b.outbox(t, events.TopicCommandSettled)[settledBefore:]
	require.ElementsMatch(t, []map[string]any{
		{"commandId": pending.ID, "nodeId": b.node.ID, "kind": "test.refresh", "state": "cancelled", "reason": "node-deleted"},
		{"commandId": running.ID, "nodeId": b.node.ID, "kind": "test.refresh", "state": "cancelled", "reason": "node-deleted"},
		{"commandId": dispatched.ID, "nodeId": b.node.ID, "kind": "test.refresh", "state": "cancelled", "reason": "node-deleted"},
	}, settled, "one command.settled each")

	wctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
	defer cancel()
	deleted, err := queue.WaitNodeDeleted(wctx, conn.Conn())
	require.NoError(t, err)
	require.Equal(t, b.node.ID, deleted)

	// A late report of the node changes nothing.
	_, changed := b.transition(t, queue.Transition{CommandID: running.ID, To: queue.Succeeded})
	require.False(t, changed)

	_, err = b.q.GetNode(b.ctx, b.pool, b.tenant.ID, b.node.ID)
	requireCode(t, err, errcode.NotFound)
	err = pgx.BeginFunc(b.ctx, b.pool, func(tx pgx.Tx) error { _, err := b.q.DeleteNode(b.ctx, tx, b.node.ID); return err })
	requireCode(t, err, errcode.NotFound)
	gone, err := b.q.DeletedNodes(b.ctx, b.pool, []string{b.node.ID, "node_unknown"})
	require.NoError(t, err)
	require.Equal(t, []string{b.node.ID}, gone)
}
