package queue_test

import (
	"crypto/sha256"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/controlplane/commands/events"
	"github.com/better-compute/commands/controlplane/commands/queue"
	"github.com/better-compute/commands/controlplane/internal/errcode"
	"github.com/better-compute/commands/controlplane/internal/ids"
)

// "Reports may skip steps ... a state never moves backwards (a late running
// after succeeded changes nothing)", and command.settled is published once.
func TestTransitionForwardOnly(t *testing.T) {
	b := setup(t)
	cmd, _ := b.enqueue(t, b.params("k"))

	got, changed := b.transition(t, queue.Transition{CommandID: cmd.ID, To: queue.Dispatched, Epoch: 0})
	require.True(t, changed)
	require.Equal(t, 1, got.Attempts)

	// Skips acked and running: "a lost acknowledgement does not stop a result from landing".
	result := json.RawMessage(`{"gpus":8}`)
	sum := sha256.Sum256(result)
	got, changed = b.transition(t, queue.Transition{CommandID: cmd.ID, To: queue.Succeeded, Result: result, ResultSHA256: sum[:], NodeSig: []byte("sig")})
	require.True(t, changed)
	require.Equal(t, queue.Succeeded, got.State)
	require.NotNil(t, got.SettledAt)
	require.JSONEq(t, `{"gpus":8}`, string(got.Result))
	require.Equal(t, sum[:], got.ResultSHA256)
	require.Equal(t, []byte("sig"), got.NodeSig)

	for _, late := range []queue.State{queue.Running, queue.Acked, queue.Dispatched, queue.Failed, queue.Cancelled, queue.Succeeded} {
		after, changed := b.transition(t, queue.Transition{CommandID: cmd.ID, To: late, Reason: "late"})
		require.False(t, changed, "late %s", late)
		require.Equal(t, queue.Succeeded, after.State)
		require.Equal(t, got.UpdatedAt, after.UpdatedAt)
		require.Equal(t, "", after.Reason)
	}
	require.Equal(t, []map[string]any{{"commandId": cmd.ID, "nodeId": b.node.ID, "kind": "test.refresh", "state": "succeeded", "reason": ""}},
		b.outbox(t, events.TopicCommandSettled), "command.settled exactly once")

	_, _, err := b.q.Transition(b.ctx, b.pool, queue.Transition{CommandID: ids.NewCommand(), To: queue.Running})
	requireCode(t, err, errcode.NotFound)
	_, _, err = b.q.Transition(b.ctx, b.pool, queue.Transition{CommandID: cmd.ID, To: queue.Pending})
	requireCode(t, err, errcode.InvalidInput)
}

// Enforced in SQL, not only in Go: a raw UPDATE that moves a state back, or
// changes a terminal one, is refused by the database.
func TestStateNeverBackwardsInSQL(t *testing.T) {
	b := setup(t)
	cmd, _ := b.enqueue(t, b.params("k"))
	b.transition(t, queue.Transition{CommandID: cmd.ID, To: queue.Running})
	_, err := b.pool.Exec(b.ctx, `UPDATE commands SET state = 'acked' WHERE id = $1`, cmd.ID)
	requireCheckViolation(t, err)
	b.transition(t, queue.Transition{CommandID: cmd.ID, To: queue.Succeeded})
	_, err = b.pool.Exec(b.ctx, `UPDATE commands SET state = 'running', settled_at = NULL WHERE id = $1`, cmd.ID)
	requireCheckViolation(t, err)
	_, err = b.pool.Exec(b.ctx, `UPDATE commands SET state = 'failed' WHERE id = $1`, cmd.ID)
	requireCheckViolation(t, err)
}

// CHECK: settled_at is set exactly when the state is terminal.
func TestSettledCheckConstraint(t *testing.T) {
	b := setup(t)
	cmd, _ := b.enqueue(t, b.params("k"))
	_, err := b.pool.Exec(b.ctx, `UPDATE commands SET state = 'succeeded' WHERE id = $1`, cmd.ID)
	requireCheckViolation(t, err)
	_, err = b.pool.Exec(b.ctx, `UPDATE commands SET settled_at = now() WHERE id = $1`, cmd.ID)
	requireCheckViolation(t, err)
	_, err = b.pool.Exec(b.ctx, `UPDATE commands SET state = 'bogus' WHERE id = $1`, cmd.ID)
	requireCheckViolation(t, err)
}

func requireCheckViolation(t *testing.T, err error) {
	t.Helper()
	var pe *pgconn.PgError
	require.True(t, errors.As(err, &pe), "want a check violation, got %v", err)
	require.Equal(t, "23514", pe.Code, pe.Message)
}

// Epoch fencing: a report from a superseded session does not land.
func TestTransitionEpochFence(t *testing.T) {
	b := setup(t)
	cmd, _ := b.enqueue(t, b.params("k"))
	e1, err := b.q.BeginSession(b.ctx, b.pool, b.node.ID)
	require.NoError(t, err)
	got, changed := b.transition(t, queue.Transition{CommandID: cmd.ID, To: queue.Dispatched, Epoch: e1})
	require.True(t, changed)
	require.Equal(t, e1, got.DispatchedEpoch)

	e2, err := b.q.BeginSession(b.ctx, b.pool, b.node.ID)
	require.NoError(t, err)
	require.Greater(t, e2, e1)
	got, changed = b.transition(t, queue.Transition{CommandID: cmd.ID, To: queue.Running, Epoch: e1})
	require.False(t, changed, "the old session's report must not land")
	require.Equal(t, queue.Dispatched, got.State)
	_, changed = b.transition(t, queue.Transition{CommandID: cmd.ID, To: queue.Running, Epoch: e2})
	require.True(t, changed)
}

// A session moves only its own node's commands: epochs are per node, so
// another node's session with the same epoch number must not settle this
// node's command by naming its id.
func TestTransitionOtherNodeIsNotFound(t *testing.T) {
	b := setup(t)
	cmd, _ := b.enqueue(t, b.params("k"))
	other, err := b.q.CreateNode(b.ctx, b.pool, queue.Node{TenantID: b.tenant.ID})
	require.NoError(t, err)
	mine, err := b.q.BeginSession(b.ctx, b.pool, b.node.ID)
	require.NoError(t, err)
	theirs, err := b.q.BeginSession(b.ctx, b.pool, other.ID)
	require.NoError(t, err)
	require.Equal(t, mine, theirs, "the epochs collide, so only the node id tells the sessions apart")

	_, _, err = b.q.Transition(b.ctx, b.pool, queue.Transition{CommandID: cmd.ID, NodeID: other.ID, To: queue.Succeeded, Epoch: theirs,
		Result: json.RawMessage(`{"forged":true}`)})
	requireCode(t, err, errcode.NotFound)
	got, err := b.q.Get(b.ctx, b.pool, b.node.ID, cmd.ID)
	require.NoError(t, err)
	require.Equal(t, queue.Pending, got.State)
	require.Nil(t, got.Result)

	got, changed := b.transition(t, queue.Transition{CommandID: cmd.ID, NodeID: b.node.ID, To: queue.Succeeded, Epoch: mine})
	require.True(t, changed)
	require.Equal(t, queue.Succeeded, got.State)
}

// BUSY: "the gateway puts the command back to pending with a backoff"; the
// only move towards pending, and never from running or a terminal state.
func TestRequeue(t *testing.T) {
	b := setup(t)
	cmd, _ := b.enqueue(t, b.params("k"))
	b.transition(t, queue.Transition{CommandID: cmd.ID, To: queue.Dispatched})
	other, err := b.q.CreateNode(b.ctx, b.pool, queue.Node{TenantID: b.tenant.ID})
	require.NoError(t, err)
	_, _, err = b.q.Requeue(b.ctx, b.pool, other.ID, cmd.ID, 0, time.Second)
	requireCode(t, err, errcode.NotFound) // another node's session cannot requeue it

	got, changed, err := b.q.Requeue(b.ctx, b.pool, b.node.ID, cmd.ID, 0, 5*time.Second)
	require.NoError(t, err)
	require.True(t, changed)
	require.Equal(t, queue.Pending, got.State)
	require.NotNil(t, got.NextAttemptAt)
	require.WithinDuration(t, time.Now().Add(5*time.Second), *got.NextAttemptAt, 3*time.Second)

	b.transition(t, queue.Transition{CommandID: cmd.ID, To: queue.Running})
	got, changed, err = b.q.Requeue(b.ctx, b.pool, b.node.ID, cmd.ID, 0, time.Second)
	require.NoError(t, err)
	require.False(t, changed)
	require.Equal(t, queue.Running, got.State)
}

// Progress replaces the stored progress without moving the state when the
// state does not rank higher.
func TestTransitionRecordsProgressAndRebooted(t *testing.T) {
	b := setup(t)
	p := b.params("reboot-0412")
	p.Kind, p.Payload = rebootKind.Kind, nil
	cmd, _ := b.enqueue(t, p)
	got, changed := b.transition(t, queue.Transition{CommandID: cmd.ID, To: queue.Running, Progress: json.RawMessage(`{"step":"systemctl reboot"}`)})
	require.True(t, changed)
	require.JSONEq(t, `{"step":"systemctl reboot"}`, string(got.Progress))
	got, _ = b.transition(t, queue.Transition{CommandID: cmd.ID, To: queue.Succeeded, Rebooted: true})
	require.True(t, got.Rebooted)
	require.True(t, got.Flags.SelfTerminating)
}

// Progress is stored while a command runs, never after it settled.
func TestRecordProgress(t *testing.T) {
	b := setup(t)
	cmd, _ := b.enqueue(t, b.params("k"))
	b.transition(t, queue.Transition{CommandID: cmd.ID, To: queue.Running})
	ok, err := b.q.RecordProgress(b.ctx, b.pool, cmd.ID, 0, []byte(`{"done":1,"of":3}`))
	require.NoError(t, err)
	require.True(t, ok)
	got, err := b.q.Get(b.ctx, b.pool, "", cmd.ID)
	require.NoError(t, err)
	require.JSONEq(t, `{"done":1,"of":3}`, string(got.Progress))
	require.Equal(t, queue.Running, got.State)

	b.transition(t, queue.Transition{CommandID: cmd.ID, To: queue.Succeeded})
	ok, err = b.q.RecordProgress(b.ctx, b.pool, cmd.ID, 0, []byte(`{"done":2,"of":3}`))
	require.NoError(t, err)
	require.False(t, ok)
	_, err = b.q.RecordProgress(b.ctx, b.pool, ids.NewCommand(), 0, []byte(`{}`))
	requireCode(t, err, errcode.NotFound)
}

// The forward-only trigger's function is not called for a move that is
// allowed on its face (migration 0081): a command's way from pending to
// succeeded makes no call, while a move back still reaches it and is
// refused.
func TestForwardOnlyTriggerRunsOnlyForAMoveItMayRefuse(t *testing.T) {
	b := setup(t)
	cmd, _ := b.enqueue(t, b.params("k"))
	tx, err := b.pool.Begin(b.ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(b.ctx) }()
	_, err = tx.Exec(b.ctx, `SET LOCAL track_functions = 'pl'`)
	require.NoError(t, err)
	calls := func() int64 {
		var n int64
		require.NoError(t, tx.QueryRow(b.ctx, `SELECT coalesce(sum(calls), 0)::bigint FROM pg_stat_xact_user_functions WHERE funcname = 'bc_commands_forward_only'`).Scan(&n))
		return n
	}
	for _, to := range []queue.State{queue.Dispatched, queue.Acked, queue.Running, queue.Succeeded} {
		_, changed, err := b.q.Transition(b.ctx, tx, queue.Transition{CommandID: cmd.ID, To: to})
		require.NoError(t, err)
		require.True(t, changed, "to %s", to)
	}
	require.Zero(t, calls(), "the trigger's function ran for a move up")
	// (The CHECK on settled_at holds for this row: the refusal is the
	// function's own.)
	_, err = tx.Exec(b.ctx, `UPDATE commands SET state = 'running', settled_at = NULL WHERE id = $1`, cmd.ID)
	requireCheckViolation(t, err)
	require.ErrorContains(t, err, "is terminal; refusing running", "the move back reached the trigger's function")
}
