package queue_test

import (
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/controlplane/commands/queue"
	"github.com/better-compute/commands/controlplane/internal/errcode"
)

// "list is newest first by seq, filters by state, and returns up to 200 per
// page (100 by default)", with an opaque page cursor.
func TestListOrderPagingFilter(t *testing.T) {
	b := setup(t)
	var cmds []queue.Command
	require.NoError(t, pgx.BeginFunc(b.ctx, b.pool, func(tx pgx.Tx) error {
		for i := range 205 {
			cmd, _, err := b.q.Enqueue(b.ctx, tx, b.params(fmt.Sprintf("k-%d", i)))
			if err != nil {
				return err
			}
			cmds = append(cmds, cmd)
		}
		return nil
	}))
	for _, i := range []int{3, 7, 100, 204} {
		b.transition(t, queue.Transition{CommandID: cmds[i].ID, To: queue.Failed, Reason: "timeout"})
	}

	items, next, err := b.q.List(b.ctx, b.pool, queue.ListParams{TenantID: b.tenant.ID, NodeID: b.node.ID})
	require.NoError(t, err)
	require.Len(t, items, queue.DefaultListLimit)
	require.Equal(t, int64(205), items[0].Seq)
	require.NotEmpty(t, next)

	items, next, err = b.q.List(b.ctx, b.pool, queue.ListParams{NodeID: b.node.ID, Limit: 1000})
	require.NoError(t, err)
	require.Len(t, items, queue.MaxListLimit)
	require.NotEmpty(t, next)

	// Walk every page of 7: newest first, no gaps, no repeats.
	var seqs []int64
	cursor := ""
	for {
		items, next, err := b.q.List(b.ctx, b.pool, queue.ListParams{NodeID: b.node.ID, Limit: 7, Cursor: cursor})
		require.NoError(t, err)
		require.LessOrEqual(t, len(items), 7)
		for _, c := range items {
			seqs = append(seqs, c.Seq)
		}
		if next == "" {
			break
		}
		cursor = next
	}
	require.Len(t, seqs, 205)
	for i, s := range seqs {
		require.Equal(t, int64(205-i), s)
	}

	failed, next, err := b.q.List(b.ctx, b.pool, queue.ListParams{NodeID: b.node.ID, State: queue.Failed, Limit: 3})
	require.NoError(t, err)
	require.Equal(t, []int64{205, 101, 8}, []int64{failed[0].Seq, failed[1].Seq, failed[2].Seq})
	rest, last, err := b.q.List(b.ctx, b.pool, queue.ListParams{NodeID: b.node.ID, State: queue.Failed, Limit: 3, Cursor: next})
	require.NoError(t, err)
	require.Len(t, rest, 1)
	require.Equal(t, int64(4), rest[0].Seq)
	require.Equal(t, "", last)
}

func TestListRefusals(t *testing.T) {
	b := setup(t)
	_, _, err := b.q.List(b.ctx, b.pool, queue.ListParams{NodeID: b.node.ID, Cursor: "not-a-cursor"})
	requireCode(t, err, errcode.InvalidInput)
	_, _, err = b.q.List(b.ctx, b.pool, queue.ListParams{NodeID: b.node.ID, State: "done"})
	requireCode(t, err, errcode.InvalidInput)
	_, _, err = b.q.List(b.ctx, b.pool, queue.ListParams{NodeID: b.node.ID, Limit: -1})
	requireCode(t, err, errcode.InvalidInput)
	_, _, err = b.q.List(b.ctx, b.pool, queue.ListParams{})
	requireCode(t, err, errcode.InvalidInput)
	other, err := b.q.CreateTenant(b.ctx, b.pool, queue.Tenant{})
	require.NoError(t, err)
	_, _, err = b.q.List(b.ctx, b.pool, queue.ListParams{TenantID: other.ID, NodeID: b.node.ID})
	requireCode(t, err, errcode.NotFound)
}

// ListOpen is the replay: non-terminal commands in seq order.
func TestListOpenInSeqOrder(t *testing.T) {
	b := setup(t)
	a, _ := b.enqueue(t, b.params("a"))
	c2, _ := b.enqueue(t, b.params("b"))
	c3, _ := b.enqueue(t, b.params("c"))
	b.transition(t, queue.Transition{CommandID: c2.ID, To: queue.Succeeded})
	b.transition(t, queue.Transition{CommandID: c3.ID, To: queue.Running})
	open, err := b.q.ListOpen(b.ctx, b.pool, b.node.ID)
	require.NoError(t, err)
	require.Len(t, open, 2)
	require.Equal(t, []string{a.ID, c3.ID}, []string{open[0].ID, open[1].ID})
}

// ListOpenMany answers for many nodes what ListOpen answers for each: its
// non-terminal commands in seq order, and nothing for a node without any.
func TestListOpenManyIsListOpenPerNode(t *testing.T) {
	b := setup(t)
	other, err := b.q.CreateNode(b.ctx, b.pool, queue.Node{TenantID: b.tenant.ID})
	require.NoError(t, err)
	idle, err := b.q.CreateNode(b.ctx, b.pool, queue.Node{TenantID: b.tenant.ID})
	require.NoError(t, err)
	var mine []queue.Command
	for i := range 4 {
		c, _ := b.enqueue(t, b.params(fmt.Sprintf("m-%d", i)))
		mine = append(mine, c)
		p := b.params(fmt.Sprintf("o-%d", i))
		p.NodeID = other.ID
		b.enqueue(t, p)
	}
	b.transition(t, queue.Transition{CommandID: mine[1].ID, To: queue.Succeeded})
	many, err := b.q.ListOpenMany(b.ctx, b.pool, []string{b.node.ID, other.ID, idle.ID})
	require.NoError(t, err)
	for _, n := range []string{b.node.ID, other.ID} {
		one, err := b.q.ListOpen(b.ctx, b.pool, n)
		require.NoError(t, err)
		require.Equal(t, one, many[n], "node %s", n)
	}
	require.Len(t, many[b.node.ID], 3, "the settled one is not open")
	require.NotContains(t, many, idle.ID)
}

// InFlight names, of the commands it is asked about, those sent to their
// node and not settled: not a pending one, a settled one, an unknown one,
// nor one asked about under another node.
func TestInFlightNamesTheDispatchedNotSettledCommands(t *testing.T) {
	b := setup(t)
	other, err := b.q.CreateNode(b.ctx, b.pool, queue.Node{TenantID: b.tenant.ID})
	require.NoError(t, err)
	var cs []queue.Command
	for i := range 6 {
		c, _ := b.enqueue(t, b.params(fmt.Sprintf("f-%d", i)))
		cs = append(cs, c)
	}
	b.transition(t, queue.Transition{CommandID: cs[1].ID, To: queue.Dispatched})
	b.transition(t, queue.Transition{CommandID: cs[2].ID, To: queue.Acked})
	b.transition(t, queue.Transition{CommandID: cs[3].ID, To: queue.Running})
	b.transition(t, queue.Transition{CommandID: cs[4].ID, To: queue.Failed, Reason: "timeout"})
	b.transition(t, queue.Transition{CommandID: cs[5].ID, To: queue.Running})
	refs := []queue.CommandRef{
		{NodeID: b.node.ID, CommandID: cs[0].ID}, {NodeID: b.node.ID, CommandID: cs[1].ID}, {NodeID: b.node.ID, CommandID: cs[2].ID},
		{NodeID: b.node.ID, CommandID: cs[3].ID}, {NodeID: b.node.ID, CommandID: cs[4].ID},
		{NodeID: other.ID, CommandID: cs[5].ID}, {NodeID: b.node.ID, CommandID: "cmd_unknown"},
	}
	got, err := b.q.InFlight(b.ctx, b.pool, refs)
	require.NoError(t, err)
	require.Equal(t, map[string]bool{cs[1].ID: true, cs[2].ID: true, cs[3].ID: true}, got)
	none, err := b.q.InFlight(b.ctx, b.pool, nil)
	require.NoError(t, err)
	require.Empty(t, none)
}
