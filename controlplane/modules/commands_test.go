package modules_test

import (
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/controlplane/commands/queue"
	"github.com/better-compute/commands/controlplane/internal/errcode"
	"github.com/better-compute/commands/controlplane/modules"
)

type nopModule struct{ name string }

func (m nopModule) Name() string { return m.name }

// "Modules queue any registered kind through the command queue,
// ctx.commands.enqueue(tx, command), in their own transaction": a module's
// enqueue rolled back with its transaction leaves no command (and no seq
// taken), and its own row goes with it; committed, both exist.
func TestEnqueueRolledBackWithTheModulesTxLeavesNoCommand(t *testing.T) {
	b := setup(t)
	h, err := modules.NewHost(b.pool, b.q, b.reg, modules.HostOptions{}, nopModule{"wf"})
	require.NoError(t, err)
	mc := h.Context("wf")
	key := modules.StepKey("rb-1", "reset", 1)

	tx, err := b.pool.Begin(b.ctx)
	require.NoError(t, err)
	cmd, dup, err := mc.Commands().Enqueue(b.ctx, tx, b.step(key))
	require.NoError(t, err)
	require.False(t, dup)
	_, err = tx.Exec(b.ctx, `INSERT INTO module_steps VALUES ('rb-1', 'reset', $1)`, cmd.ID)
	require.NoError(t, err)
	require.NoError(t, tx.Rollback(b.ctx))

	var commands, steps int
	var nextSeq int64
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT count(*) FROM commands WHERE node_id = $1`, b.node).Scan(&commands))
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT count(*) FROM module_steps`).Scan(&steps))
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT next_cmd_seq FROM nodes WHERE id = $1`, b.node).Scan(&nextSeq))
	require.Zero(t, commands, "the rolled-back enqueue left no command")
	require.Zero(t, steps)
	require.EqualValues(t, 1, nextSeq, "no seq was taken")
	_, err = b.q.Get(b.ctx, b.pool, b.node, cmd.ID)
	require.ErrorIs(t, err, errcode.ErrNotFound)

	require.NoError(t, pgx.BeginFunc(b.ctx, b.pool, func(tx pgx.Tx) error {
		c, _, err := mc.Commands().Enqueue(b.ctx, tx, b.step(key))
		if err != nil {
			return err
		}
		cmd = c
		_, err = tx.Exec(b.ctx, `INSERT INTO module_steps VALUES ('rb-1', 'reset', $1)`, c.ID)
		return err
	}))
	got, err := b.q.Get(b.ctx, b.pool, b.node, cmd.ID)
	require.NoError(t, err)
	require.Equal(t, key, got.IdempotencyKey)
	require.EqualValues(t, 1, got.Seq)
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT count(*) FROM module_steps WHERE command_id = $1`, cmd.ID).Scan(&steps))
	require.Equal(t, 1, steps)
}

// "ctx.commands.cancel(tx, commandId)": the cancel runs in the module's
// transaction too; rolled back, the command stays pending; committed, a
// pending command is cancelled at once.
func TestCancelRunsInTheModulesTx(t *testing.T) {
	b := setup(t)
	h, err := modules.NewHost(b.pool, b.q, b.reg, modules.HostOptions{}, nopModule{"wf"})
	require.NoError(t, err)
	mc := h.Context("wf")
	var cmd queue.Command
	require.NoError(t, pgx.BeginFunc(b.ctx, b.pool, func(tx pgx.Tx) error {
		var err error
		cmd, _, err = mc.Commands().Enqueue(b.ctx, tx, b.step(modules.StepKey("c-1", "s", 1)))
		return err
	}))
	tx, err := b.pool.Begin(b.ctx)
	require.NoError(t, err)
	got, err := mc.Commands().Cancel(b.ctx, tx, cmd.ID)
	require.NoError(t, err)
	require.Equal(t, queue.Cancelled, got.State)
	require.NoError(t, tx.Rollback(b.ctx))
	cur, err := b.q.Get(b.ctx, b.pool, b.node, cmd.ID)
	require.NoError(t, err)
	require.Equal(t, queue.Pending, cur.State, "the rolled-back cancel changed nothing")

	require.NoError(t, pgx.BeginFunc(b.ctx, b.pool, func(tx pgx.Tx) error {
		_, err := mc.Commands().Cancel(b.ctx, tx, cmd.ID)
		return err
	}))
	cur, err = b.q.Get(b.ctx, b.pool, b.node, cmd.ID)
	require.NoError(t, err)
	require.Equal(t, queue.Cancelled, cur.State)
	require.Equal(t, queue.ReasonCancelled, cur.Reason)
}

// A module's keys are its own: none is refused (a settled command could
// wake nobody), and an API caller's api:… key is refused, both naming the
// field.
func TestEnqueueRefusesKeysThatAreNotTheModules(t *testing.T) {
	b := setup(t)
	h, err := modules.NewHost(b.pool, b.q, b.reg, modules.HostOptions{}, nopModule{"wf"})
	require.NoError(t, err)
	mc := h.Context("wf")
	for _, key := range []string{"", queue.APIKey(b.tenant, "ops", "k")} {
		err := pgx.BeginFunc(b.ctx, b.pool, func(tx pgx.Tx) error {
			_, _, err := mc.Commands().Enqueue(b.ctx, tx, b.step(key))
			return err
		})
		require.ErrorIs(t, err, errcode.ErrInvalidInput, key)
		require.Contains(t, err.Error(), "idempotency key")
	}
}

// "a deliberate retry of a step appends its attempt": the same step and
// attempt return the first command; attempt 2 queues another.
func TestStepKeyRetryAppendsTheAttempt(t *testing.T) {
	require.Equal(t, "wf:w1:reset", modules.StepKey("w1", "reset", 1))
	require.Equal(t, "wf:w1:reset:2", modules.StepKey("w1", "reset", 2))
	require.Equal(t, "acceptance:node_1:3:diag.nvml", modules.AcceptanceKey("node_1", 3, "diag.nvml"))
	b := setup(t)
	h, err := modules.NewHost(b.pool, b.q, b.reg, modules.HostOptions{}, nopModule{"wf"})
	require.NoError(t, err)
	mc := h.Context("wf")
	enq := func(key string) (queue.Command, bool) {
		var (
			c   queue.Command
			dup bool
		)
		require.NoError(t, pgx.BeginFunc(b.ctx, b.pool, func(tx pgx.Tx) error {
			var err error
			c, dup, err = mc.Commands().Enqueue(b.ctx, tx, b.step(key))
			return err
		}))
		return c, dup
	}
	first, _ := enq(modules.StepKey("w1", "reset", 1))
	again, dup := enq(modules.StepKey("w1", "reset", 1))
	require.True(t, dup)
	require.Equal(t, first.ID, again.ID)
	retry, dup := enq(modules.StepKey("w1", "reset", 2))
	require.False(t, dup)
	require.NotEqual(t, first.ID, retry.ID)
}

// EnqueueFor queues for the person who asked the module's own API: the
// command names them as its requester and the module as the way it came;
// the module's key rules hold as for Enqueue. Check refuses what Enqueue
// would without queueing anything.
func TestEnqueueForRecordsWhoAskedAndCheckQueuesNothing(t *testing.T) {
	b := setup(t)
	h, err := modules.NewHost(b.pool, b.q, b.reg, modules.HostOptions{}, nopModule{"wf"})
	require.NoError(t, err)
	cmds := h.Context("wf").Commands()
	var cmd modules.StoredCommand
	require.NoError(t, pgx.BeginFunc(b.ctx, b.pool, func(tx pgx.Tx) error {
		var err error
		cmd, _, err = cmds.EnqueueFor(b.ctx, tx, "alice", b.step(modules.StepKey("for-1", "s", 1)))
		return err
	}))
	got, err := cmds.Get(b.ctx, b.pool, b.node, cmd.ID)
	require.NoError(t, err)
	require.Equal(t, "alice", got.Requester)
	require.Equal(t, queue.ViaModule+":wf", got.RequestedVia)
	require.Equal(t, modules.StatePending, got.State)
	err = pgx.BeginFunc(b.ctx, b.pool, func(tx pgx.Tx) error {
		_, _, err := cmds.EnqueueFor(b.ctx, tx, "alice", b.step(queue.APIKey(b.tenant, "alice", "k")))
		return err
	})
	require.ErrorIs(t, err, errcode.ErrInvalidInput)

	require.NoError(t, cmds.Check(b.step("")))
	bad := b.step("")
	bad.Kind = "test.unknown"
	require.Error(t, cmds.Check(bad))
	list, _, err := cmds.List(b.ctx, b.pool, modules.ListParams{NodeID: b.node})
	require.NoError(t, err)
	require.Len(t, list, 1, "Check queued nothing")
}

// Fail settles an in-flight command failed in the control plane's name;
// the forward-only rule leaves a settled one as it is, and InFlight names
// only what was sent and not settled. A later report of the node is stored
// beside the failed command, where Contradictions reads it.
func TestFailAndInFlight(t *testing.T) {
	b := setup(t)
	h, err := modules.NewHost(b.pool, b.q, b.reg, modules.HostOptions{}, nopModule{"wf"})
	require.NoError(t, err)
	cmds := h.Context("wf").Commands()
	var sent, pending modules.StoredCommand
	require.NoError(t, pgx.BeginFunc(b.ctx, b.pool, func(tx pgx.Tx) error {
		var err error
		if sent, _, err = cmds.Enqueue(b.ctx, tx, b.step(modules.StepKey("f-1", "a", 1))); err != nil {
			return err
		}
		pending, _, err = cmds.Enqueue(b.ctx, tx, b.step(modules.StepKey("f-1", "b", 1)))
		return err
	}))
	_, _, err = b.q.Transition(b.ctx, b.pool, queue.Transition{CommandID: sent.ID, NodeID: b.node, To: queue.Running})
	require.NoError(t, err)
	refs := []modules.CommandRef{{NodeID: b.node, CommandID: sent.ID}, {NodeID: b.node, CommandID: pending.ID}}
	in, err := cmds.InFlight(b.ctx, b.pool, refs)
	require.NoError(t, err)
	require.Equal(t, map[string]bool{sent.ID: true}, in)

	failed, changed, err := cmds.Fail(b.ctx, b.pool, b.node, sent.ID, "rejoin-timeout", "no news")
	require.NoError(t, err)
	require.True(t, changed)
	require.Equal(t, modules.StateFailed, failed.State)
	require.Equal(t, "rejoin-timeout", failed.Reason)
	_, changed, err = cmds.Fail(b.ctx, b.pool, b.node, sent.ID, "other", "again")
	require.NoError(t, err)
	require.False(t, changed, "a settled command keeps its first outcome")
	in, err = cmds.InFlight(b.ctx, b.pool, refs)
	require.NoError(t, err)
	require.Empty(t, in)

	recorded, err := b.q.RecordContradiction(b.ctx, b.pool, failed, queue.Transition{CommandID: sent.ID, NodeID: b.node, To: queue.Succeeded})
	require.NoError(t, err)
	require.True(t, recorded)
	xs, err := cmds.Contradictions(b.ctx, b.pool, sent.ID)
	require.NoError(t, err)
	require.Len(t, xs, 1)
	require.Equal(t, modules.StateSucceeded, xs[0].ReportedState)
	require.Equal(t, modules.StateFailed, xs[0].StoredState)
}
