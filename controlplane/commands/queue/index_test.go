package queue_test

import (
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

// Dispatch, replay and the sweeper read only the partial indexes over open
// rows, so they cost the same however many settled rows a node has.
func TestOpenQueriesUsePartialIndexes(t *testing.T) {
	b := setup(t)
	// 20,000 settled commands on the node, a handful open.
	_, err := b.pool.Exec(b.ctx, `
		INSERT INTO commands (id, tenant_id, node_id, seq, kind, lane, idempotency_key, not_after, state, settled_at)
		SELECT 'cmd_s' || g, $1, $2, g, 'test.refresh', 'control', 'k' || g, now() - interval '1 day', 'succeeded', now()
		FROM generate_series(1, 20000) g`, b.tenant.ID, b.node.ID)
	require.NoError(t, err)
	_, err = b.pool.Exec(b.ctx, `UPDATE nodes SET next_cmd_seq = 20001 WHERE id = $1`, b.node.ID)
	require.NoError(t, err)
	for _, k := range []string{"a", "b", "c"} {
		b.enqueue(t, b.params(k))
	}
	_, err = b.pool.Exec(b.ctx, `ANALYZE commands`)
	require.NoError(t, err)

	plan := func(sql string, args ...any) string {
		rows, err := b.pool.Query(b.ctx, "EXPLAIN "+sql, args...)
		require.NoError(t, err)
		lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		return strings.Join(lines, "\n")
	}
	replay := plan(`SELECT id FROM commands WHERE node_id = $1 AND state IN ('pending', 'dispatched', 'acked', 'running') ORDER BY seq`, b.node.ID)
	// What matters is that no plan reads the settled rows.
	require.Contains(t, replay, "commands_open_by_node", replay)
	require.NotContains(t, replay, "Seq Scan", replay)
	// The sweeper's statements name the deadline index's predicate
	// (migration 0080).
	sweep := plan(`SELECT id FROM commands WHERE settled_at IS NULL AND state = 'pending' AND not_after < now() ORDER BY not_after LIMIT 100`)
	require.Contains(t, sweep, "commands_unsettled_by_not_after", sweep)
	require.NotContains(t, sweep, "Seq Scan", sweep)
}
