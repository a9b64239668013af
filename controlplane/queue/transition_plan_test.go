package queue

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/controlplane/kinds"
	"github.com/better-compute/commands/internal/pgtest"
)

// A group of reports (TransitionSet: a fan-out's dispatches, its nodes'
// results) reads the commands it names through their primary key, however
// many other commands the table holds and whichever plan PostgreSQL picks:
// its own when the group is planned with its arrays (custom) and the one
// it keeps for any arrays (generic). The UPDATE joined the group's rows to
// commands by id alone, and PostgreSQL, counting an index probe as four
// page reads, read the whole table instead once a group held a few hundred
// rows: 3 ms for 8,000 commands, growing with every command kept, in each
// of the hundreds of groups a fan-out to 10,000 nodes stores. The rows it
// left unchanged were found by comparing every row with every updated one
// (a group of 256: 32,640 comparisons, 5 ms).
func TestTransitionSetReadsOnlyTheCommandsItNames(t *testing.T) {
	pool := pgtest.DB(t)
	ctx := context.Background()
	const history, group = 10000, 256
	// A fleet's history: settled commands, and the group's own, pending.
	_, err := pool.Exec(ctx, fmt.Sprintf(`INSERT INTO tenants (id) VALUES ('t1');
		INSERT INTO nodes (id, tenant_id) SELECT 'n' || g, 't1' FROM generate_series(1, %[1]d) g;
		INSERT INTO commands (id, tenant_id, node_id, seq, kind, lane, idempotency_key, not_after, state, settled_at)
		SELECT 'old_' || g, 't1', 'n' || g, 1, 'test.refresh', 'control', 'old' || g, now() + interval '1 day', 'succeeded', now()
		FROM generate_series(1, %[1]d) g;
		INSERT INTO commands (id, tenant_id, node_id, seq, kind, lane, idempotency_key, not_after)
		SELECT 'cmd_' || g, 't1', 'n' || g, 2, 'test.refresh', 'control', 'k' || g, now() + interval '1 day'
		FROM generate_series(1, %[2]d) g;
		ANALYZE commands; ANALYZE nodes`, history, group))
	require.NoError(t, err)
	var (
		ids, states, reasons, nodes, messages, versions = make([]string, group), make([]string, group), make([]string, group), make([]string, group), make([]string, group), make([]string, group)
		results, progress                               = make([]*string, group), make([]*string, group)
		sums, sigs, resultBytes                         = make([][]byte, group), make([][]byte, group), make([][]byte, group)
		rebooted                                        = make([]bool, group)
		epochs                                          = make([]int64, group)
	)
	for i := range group {
		ids[i], states[i], nodes[i] = fmt.Sprintf("cmd_%d", i+1), string(Dispatched), fmt.Sprintf("n%d", i+1)
	}
	for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
		t.Run(mode, func(t *testing.T) {
			tx, err := pool.Begin(ctx)
			require.NoError(t, err)
			defer func() { _ = tx.Rollback(ctx) }()
			_, err = tx.Exec(ctx, `SELECT set_config('plan_cache_mode', $1, true)`, mode)
			require.NoError(t, err)
			_, err = tx.Exec(ctx, indexedReadSetting(true))
			require.NoError(t, err)
			rows, err := tx.Query(ctx, `EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF) `+transitionSetSQL,
				ids, states, reasons, results, sums, sigs, rebooted, epochs, progress, nodes, messages, resultBytes, versions)
			require.NoError(t, err)
			var lines []string
			for rows.Next() {
				var l string
				require.NoError(t, rows.Scan(&l))
				lines = append(lines, l)
			}
			require.NoError(t, rows.Err())
			plan := strings.Join(lines, "\n")
			require.NotContains(t, plan, "Seq Scan on commands", "the group reads every command:\n%s", plan)
			require.Regexp(t, `Index Scan (using|on) commands_pkey`, plan, "the group reads its commands by id:\n%s", plan)
			require.NotContains(t, plan, "Rows Removed by Join Filter", "the group compares rows pairwise:\n%s", plan)
			require.Contains(t, plan, fmt.Sprintf("Update on commands c_1 (actual rows=%d ", group), "every command of the group moved:\n%s", plan)
		})
	}
	// TransitionSet itself: the transaction's own statistics show no read
	// of the whole table, and the setting ends with the group's statements.
	t.Run("TransitionSet", func(t *testing.T) {
		reg, err := kinds.NewRegistry()
		require.NoError(t, err)
		q := New(reg, hclog.NewNullLogger())
		tx, err := pool.Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(ctx) }()
		ts := make([]Transition, group)
		for i := range ts {
			ts[i] = Transition{CommandID: ids[i], NodeID: nodes[i], To: Dispatched}
		}
		var before, idxBefore int64
		require.NoError(t, tx.QueryRow(ctx, `SELECT seq_scan, coalesce(idx_scan, 0) FROM pg_stat_xact_user_tables WHERE relname = 'commands'`).Scan(&before, &idxBefore))
		res, err := q.TransitionSet(ctx, tx, ts)
		require.NoError(t, err)
		for i, r := range res {
			require.True(t, r.Changed, "transition %d", i)
		}
		var seqScans, idxScans int64
		var setting string
		require.NoError(t, tx.QueryRow(ctx, `SELECT seq_scan, coalesce(idx_scan, 0), current_setting('enable_seqscan')
			FROM pg_stat_xact_user_tables WHERE relname = 'commands'`).Scan(&seqScans, &idxScans, &setting))
		// The counts may hold earlier transactions' not yet flushed.
		require.Equal(t, before, seqScans, "reads of the whole commands table")
		require.Greater(t, idxScans, idxBefore, "reads of commands through an index")
		require.Equal(t, "on", setting, "the setting ends with the group's statements")
	})
}
