package fleetruns_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/controlplane/commands/batches"
	"github.com/better-compute/commands/controlplane/commands/fleetruns"
	"github.com/better-compute/commands/controlplane/commands/kinds"
	"github.com/better-compute/commands/controlplane/commands/queue"
	"github.com/better-compute/commands/controlplane/fleet/pools"
	"github.com/better-compute/commands/internal/trust"
)

func (f *fixture) withQuorum(t *testing.T) {
	t.Helper()
	for _, n := range []string{"alice", "bob"} {
		pub, _, err := trust.NewEd25519()
		require.NoError(t, err)
		f.quorum.Approvers = append(f.quorum.Approvers, trust.Approver{Name: n, PublicKey: pub})
	}
	f.quorum.Threshold = 2
}

// A destructive run whose batch passes its deadline unapproved ends failed
// (batch-expired) with every node not-started: it neither waits forever
// nor sends commands a node would refuse under an expired approval. Its
// leaves bind the run's payload.
func TestADestructiveRunEndsWhenItsBatchExpires(t *testing.T) {
	f := setup(t, 2)
	f.withQuorum(t)
	run := f.create(t, fleetruns.CreateParams{Kind: "node.reboot", Reason: "kernel", Targets: fleetruns.Targets{All: true},
		MaxConcurrency: "100%", ApprovalDeadline: time.Minute})
	b, err := batches.Get(f.ctx, f.pool, f.tenant, run.BatchID)
	require.NoError(t, err)
	for _, l := range b.Scope {
		require.NotEmpty(t, l.PayloadSHA256, "each leaf binds the run's payload")
	}
	require.NoError(t, f.s.AdvanceOnce(f.ctx))
	require.Equal(t, fleetruns.WaitApproval, f.get(t, run.ID).WaitingReason)
	later := fleetruns.New(f.pool, f.q, fleetruns.Options{Now: func() time.Time { return time.Now().Add(2 * time.Minute) },
		Quorum: func() batches.Quorum { return f.quorum }})
	require.NoError(t, later.AdvanceOnce(f.ctx))
	got := f.get(t, run.ID)
	require.Equal(t, fleetruns.StateFailed, got.State)
	require.Equal(t, fleetruns.ReasonBatchExpired, got.StateReason)
	require.Equal(t, 2, got.Counts.ByState[fleetruns.TargetNotStarted])
	require.Empty(t, f.open(t, run.ID))
}

// A node that can no longer take the run's command when its turn comes
// (deleted since the run was created) is refused then, and the run does
// not end succeeded.
func TestANodeRefusedAtItsTurnFailsTheRun(t *testing.T) {
	f := setup(t, 2)
	run := f.create(t, fleetruns.CreateParams{Targets: fleetruns.Targets{All: true}, MaxConcurrency: "1", MaxErrors: "100%"})
	require.NoError(t, pgx.BeginFunc(f.ctx, f.pool, func(tx pgx.Tx) error {
		_, err := f.q.DeleteNode(f.ctx, tx, f.nodes[1])
		return err
	}))
	for range 4 {
		require.NoError(t, f.s.AdvanceOnce(f.ctx))
		for _, c := range f.open(t, run.ID) {
			f.settle(t, c, queue.Succeeded, "")
		}
	}
	got := f.get(t, run.ID)
	require.Equal(t, fleetruns.StateFailed, got.State)
	require.Equal(t, fleetruns.ReasonNodeFailures, got.StateReason)
	require.Equal(t, 1, got.Counts.ByReason[fleetruns.ReasonEnqueueRefuse])
	require.NotContains(t, got.StateMessage, "refused at creation")
}

// A command settled by a process without the fleet runs' settle hook (a
// replica of an older release, mid-upgrade) still ends its target: the
// advancer catches up from the command's own row.
func TestASettleWithoutTheHookIsCaughtUp(t *testing.T) {
	f := setup(t, 1)
	run := f.create(t, fleetruns.CreateParams{Targets: fleetruns.Targets{All: true}})
	require.NoError(t, f.s.AdvanceOnce(f.ctx))
	open := f.open(t, run.ID)
	require.Len(t, open, 1)
	reg, err := kinds.NewRegistry(kinds.FirstParty()...)
	require.NoError(t, err)
	old := queue.New(reg, hclog.NewNullLogger()) // no hook installed
	_, _, err = old.Transition(f.ctx, f.pool, queue.Transition{CommandID: open[0].ID, To: queue.Succeeded})
	require.NoError(t, err)
	require.Equal(t, 1, f.get(t, run.ID).Counts.ByState[fleetruns.TargetStarted], "the hook did not see it")
	require.NoError(t, f.s.AdvanceOnce(f.ctx))
	require.Equal(t, fleetruns.StateSucceeded, f.get(t, run.ID).State)
}

// "stays within each pool's disruption budget": the window counts a
// disruptive run's starts, so maxPerWindow 1 lets one node start in the
// window however many may be in maintenance at once.
func TestADisruptiveRunKeepsThePoolsWindow(t *testing.T) {
	f := setup(t, 3)
	require.NoError(t, pgx.BeginFunc(f.ctx, f.pool, func(tx pgx.Tx) error {
		b := pools.Defaults(f.tenant, pools.DefaultPool)
		b.MaxConcurrent, b.MaxPerWindow = 3, 1
		_, err := pools.Set(f.ctx, tx, b, "test")
		return err
	}))
	run := f.create(t, fleetruns.CreateParams{Kind: "node.reboot", Reason: "kernel", Targets: fleetruns.Targets{All: true}, MaxConcurrency: "100%"})
	require.NoError(t, f.s.AdvanceOnce(f.ctx))
	open := f.open(t, run.ID)
	require.Len(t, open, 1, "one start in the window")
	f.settle(t, open[0], queue.Succeeded, "")
	require.NoError(t, f.s.AdvanceOnce(f.ctx))
	require.Empty(t, f.open(t, run.ID), "the window is spent although no node is in maintenance")
	got := f.get(t, run.ID)
	require.Equal(t, pools.WaitBudgetWindow, got.WaitingReason)
	require.Contains(t, got.WaitingMessage, "maxPerWindow 1")
}

// A run's command can be completed per node before it is queued (the
// server presigns each node's logs.collect upload there).
func TestPrepareCompletesEachNodesCommand(t *testing.T) {
	f := setup(t, 2)
	s := fleetruns.New(f.pool, f.q, fleetruns.Options{Prepare: func(_ context.Context, p *queue.EnqueueParams) error {
		p.Payload = json.RawMessage(`{"expectedCount": 8}`)
		p.BundleKey = "bundle-of-" + p.NodeID
		return nil
	}})
	run := f.create(t, fleetruns.CreateParams{Targets: fleetruns.Targets{All: true}, MaxConcurrency: "100%"})
	require.NoError(t, s.AdvanceOnce(f.ctx))
	open := f.open(t, run.ID)
	require.Len(t, open, 2)
	for _, c := range open {
		require.Equal(t, "bundle-of-"+c.NodeID, c.BundleKey)
		require.JSONEq(t, `{"expectedCount": 8}`, string(c.Payload))
	}
}
