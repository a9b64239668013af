package queue_test

import (
	"encoding/json"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/controlplane/commands/queue"
	"github.com/better-compute/commands/controlplane/internal/errcode"
)

func (b *bundle) startSession(t *testing.T, h queue.SessionHello) (queue.SessionStart, error) {
	t.Helper()
	var s queue.SessionStart
	err := pgx.BeginFunc(b.ctx, b.pool, func(tx pgx.Tx) error {
		var err error
		s, err = b.q.StartSession(b.ctx, tx, h)
		return err
	})
	return s, err
}

// StartSession bumps the epoch, records the Hello's ids and returns the ones
// before, from which "Hello first settles what the reconnect proves".
func TestStartSessionReturnsTheLastSessionsIDs(t *testing.T) {
	b := setup(t)
	first, err := b.startSession(t, queue.SessionHello{NodeID: b.node.ID, JournalID: "j1", BootID: "b1", Role: "node"})
	require.NoError(t, err)
	require.Equal(t, queue.SessionStart{Epoch: 1, PrevJournalID: "", PrevBootID: "", PrevRole: "node"}, first)

	second, err := b.startSession(t, queue.SessionHello{NodeID: b.node.ID, JournalID: "j1", BootID: "b2", Role: "discovery"})
	require.NoError(t, err)
	require.Equal(t, queue.SessionStart{Epoch: 2, PrevJournalID: "j1", PrevBootID: "b1", PrevRole: "node"}, second)
	n, err := b.q.GetNode(b.ctx, b.pool, "", b.node.ID)
	require.NoError(t, err)
	require.Equal(t, "discovery", n.Role)
	require.Equal(t, int64(2), n.SessionEpoch)

	require.NoError(t, pgx.BeginFunc(b.ctx, b.pool, func(tx pgx.Tx) error { _, err := b.q.DeleteNode(b.ctx, tx, b.node.ID); return err }))
	_, err = b.startSession(t, queue.SessionHello{NodeID: b.node.ID, JournalID: "j1", BootID: "b2", Role: "node"})
	requireCode(t, err, errcode.NotFound)
}

// A NodeStatus without inventory keeps the stored one; conditions are
// replaced.
func TestRecordNodeStatus(t *testing.T) {
	b := setup(t)
	read := func() (inv, conds string) {
		require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT coalesce(inventory::text, ''), coalesce(conditions::text, '') FROM nodes WHERE id = $1`, b.node.ID).Scan(&inv, &conds))
		return inv, conds
	}
	require.NoError(t, b.q.RecordNodeStatus(b.ctx, b.pool, b.node.ID, json.RawMessage(`{"gpus":[]}`), json.RawMessage(`[{"type":"A"}]`)))
	inv, conds := read()
	require.JSONEq(t, `{"gpus":[]}`, inv)
	require.JSONEq(t, `[{"type":"A"}]`, conds)
	require.NoError(t, b.q.RecordNodeStatus(b.ctx, b.pool, b.node.ID, nil, json.RawMessage(`[]`)))
	inv, conds = read()
	require.JSONEq(t, `{"gpus":[]}`, inv, "no inventory means unchanged")
	require.JSONEq(t, `[]`, conds)
}

// EndSession closes only the session it names: a late close of a session
// that a reconnect superseded (perhaps at another gateway) leaves the new
// one open.
func TestEndSessionLeavesANewerSessionOpen(t *testing.T) {
	b := setup(t)
	read := func() (gateway string, open bool) {
		require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT session_gateway, session_opened_at IS NOT NULL AND session_closed_at IS NULL FROM nodes WHERE id = $1`,
			b.node.ID).Scan(&gateway, &open))
		return gateway, open
	}
	first, err := b.startSession(t, queue.SessionHello{NodeID: b.node.ID, JournalID: "j1", BootID: "b1", Role: "node", Gateway: "gw-1"})
	require.NoError(t, err)
	gw, open := read()
	require.Equal(t, "gw-1", gw)
	require.True(t, open)
	second, err := b.startSession(t, queue.SessionHello{NodeID: b.node.ID, JournalID: "j1", BootID: "b1", Role: "node", Gateway: "gw-2"})
	require.NoError(t, err)
	require.NoError(t, b.q.EndSession(b.ctx, b.pool, b.node.ID, first.Epoch))
	gw, open = read()
	require.Equal(t, "gw-2", gw)
	require.True(t, open, "the superseded session's close must not close the newer one")
	require.NoError(t, b.q.EndSession(b.ctx, b.pool, b.node.ID, second.Epoch))
	_, open = read()
	require.False(t, open)
}
