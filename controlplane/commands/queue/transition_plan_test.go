package queue

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/controlplane/commands/kinds"
	"github.com/better-compute/commands/controlplane/internal/storetest"
)

// A group of reports (TransitionSet: a fan-out's dispatches, its nodes'
// results) reads the commands it names through their primary key, however
// many other commands the table holds and whichever plan PostgreSQL picks:
// its own when the group is planned with its arrays (custom) and the one
// it keeps for any arrays (generic). The UPDATE joined the group's rows to
// commands by id alone, and in the custom plan (which PostgreSQL uses for a
// statement's first runs on a connection, and after while it looks
// cheaper) it read the whole table once a group held a few hundred rows,
// counting an index probe as four page reads: 3 ms for 8,000 commands,
// growing with every command kept, in each of the hundreds of groups a
// fan-out to 10,000 nodes stores. The rows it left unchanged were found by
// comparing every row with every updated one (a group of 256: 32,640
// comparisons, 5 ms). The old statement failed the custom case here; its
// generic plan already read by key.
func TestTransitionSetReadsOnlyTheCommandsItNames(t *testing.T) {
	pool := storetest.DB(t)
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
	ids, states, nodes := make([]string, group), make([]string, group), make([]string, group)
	for i := range group {
		ids[i], states[i], nodes[i] = fmt.Sprintf("cmd_%d", i+1), string(Dispatched), fmt.Sprintf("n%d", i+1)
	}
	reg, err := kinds.NewRegistry()
	require.NoError(t, err)
	q := New(reg, hclog.NewNullLogger())
	// Each mode in a transaction rolled back: the group stays pending.
	for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
		t.Run(mode, func(t *testing.T) {
			tx := inPlanMode(t, pool, mode)
			plan := explainPrepared(t, tx, "tset_"+mode, transitionSetSQL, arrayLiterals(group, ids, states, nodes))
			require.NotContains(t, plan, "Seq Scan on commands", "the group reads every command:\n%s", plan)
			require.Regexp(t, `Index Scan (using|on) commands_pkey`, plan, "the group reads its commands by id:\n%s", plan)
			require.NotContains(t, plan, "Rows Removed by Join Filter", "the group compares rows pairwise:\n%s", plan)
			// (PostgreSQL 18 prints row counts with two decimals.)
			require.Regexp(t, fmt.Sprintf(`Update on commands c_1 \(actual rows=%d(\.00)? `, group), plan, "every command of the group moved:\n%s", plan)

			// TransitionSet itself, in the same mode: the transaction's own
			// statistics show no read of the whole table, and the setting
			// ends with the group's statement. (The counts may hold earlier
			// transactions' not yet flushed: only what it adds counts.)
			// The EXPLAIN moved the group to dispatched; it goes on to running.
			var seqBefore, idxBefore int64
			require.NoError(t, tx.QueryRow(ctx, `SELECT seq_scan, coalesce(idx_scan, 0) FROM pg_stat_xact_user_tables WHERE relname = 'commands'`).Scan(&seqBefore, &idxBefore))
			ts := make([]Transition, group)
			for i := range ts {
				ts[i] = Transition{CommandID: ids[i], NodeID: nodes[i], To: Running}
			}
			res, err := q.TransitionSet(ctx, tx, ts)
			require.NoError(t, err)
			for i, r := range res {
				require.True(t, r.Changed, "transition %d", i)
			}
			var seqScans, idxScans int64
			var seqscan, planMode string
			require.NoError(t, tx.QueryRow(ctx, `SELECT seq_scan, coalesce(idx_scan, 0), current_setting('enable_seqscan'), current_setting('plan_cache_mode')
				FROM pg_stat_xact_user_tables WHERE relname = 'commands'`).Scan(&seqScans, &idxScans, &seqscan, &planMode))
			require.Equal(t, seqBefore, seqScans, "reads of the whole commands table")
			require.Greater(t, idxScans, idxBefore, "reads of commands through an index")
			require.Equal(t, "on", seqscan, "the settings end with the group's statement")
			require.Equal(t, "auto", planMode, "the settings end with the group's statement")
			// It ran on its generic plan, whatever the transaction's mode:
			// a group is not planned afresh. (The pool may hand both modes
			// one connection, and pgx's prepared statement with it.)
			var generic, custom int64
			require.NoError(t, tx.QueryRow(ctx, `SELECT generic_plans, custom_plans FROM pg_prepared_statements
				WHERE statement LIKE '%UPDATE commands c SET%' AND statement LIKE '%WITH ORDINALITY AS t(id, to_state%'`).Scan(&generic, &custom))
			require.Positive(t, generic, "runs on the generic plan")
			require.Zero(t, custom, "runs on a custom plan")
		})
	}
}

// arrayLiterals is transitionSetSQL's 13 arguments as SQL literals for n
// transitions of ids to states on nodes, every other field empty.
func arrayLiterals(n int, ids, states, nodes []string) string {
	text := func(xs []string) string { return "ARRAY['" + strings.Join(xs, "','") + "']" }
	fill := func(v string) string { return fmt.Sprintf("array_fill(%s, ARRAY[%d])", v, n) }
	return strings.Join([]string{
		text(ids), text(states), fill("''::text"), fill("NULL::text"), fill("NULL::bytea"), fill("NULL::bytea"),
		fill("false"), fill("0::bigint"), fill("NULL::text"), text(nodes), fill("''::text"), fill("NULL::bytea"), fill("''::text"),
	}, ", ")
}
