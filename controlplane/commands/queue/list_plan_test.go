package queue

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/controlplane/commands/kinds"
	"github.com/better-compute/commands/controlplane/internal/storetest"
)

// A read of many nodes' open commands (ListOpenMany: the sessions a
// fan-out wakes) finds each node's through commands_open_by_node, one
// lookup per node, under both of PostgreSQL's plans, with the statistics a
// fleet's open indexes have between fan-outs: taken while they were
// empty. The fan-out here is 10,000 new commands, one per node, and the
// read names 512 of the nodes. The old statement (node_id = ANY of the
// ids, beside a deadline index with the same predicate) walked all
// 10,000 open commands and tested each against the 512 ids, in each of
// the reads a fan-out makes: it fails this test.
func TestListOpenManyReadsOnlyTheNodesItNames(t *testing.T) {
	// One connection: the read below and the check of its plan share it.
	pool := storetest.DBConfig(t, func(c *pgxpool.Config) { c.MaxConns = 1 })
	ctx := context.Background()
	const nodes, read = 10000, 512
	_, err := pool.Exec(ctx, fmt.Sprintf(`INSERT INTO tenants (id) VALUES ('t1');
		INSERT INTO nodes (id, tenant_id) SELECT 'n' || g, 't1' FROM generate_series(1, %[1]d) g;
		INSERT INTO commands (id, tenant_id, node_id, seq, kind, lane, idempotency_key, not_after, state, settled_at)
		SELECT 'old_' || g || '_' || s, 't1', 'n' || g, s, 'test.refresh', 'control', 'old' || g || '_' || s, now() + interval '1 day', 'succeeded', now()
		FROM generate_series(1, %[1]d) g, generate_series(1, 3) s`, nodes))
	require.NoError(t, err)
	// Statistics taken with nothing open, as autovacuum takes them between
	// fan-outs.
	_, err = pool.Exec(ctx, `VACUUM ANALYZE commands`)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, fmt.Sprintf(`INSERT INTO commands (id, tenant_id, node_id, seq, kind, lane, idempotency_key, not_after)
		SELECT 'cmd_' || g, 't1', 'n' || g, 4, 'test.refresh', 'control', 'k' || g, now() + interval '1 day'
		FROM generate_series(1, %d) g`, nodes))
	require.NoError(t, err)
	ids := make([]string, read)
	for i := range ids {
		ids[i] = fmt.Sprintf("n%d", i*(nodes/read)+1)
	}
	for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
		t.Run(mode, func(t *testing.T) {
			tx := inPlanMode(t, pool, mode)
			plan := explainPrepared(t, tx, "lom_"+mode, listOpenManySQL, `ARRAY['`+strings.Join(ids, "','")+`']`)
			require.NotContains(t, plan, "Seq Scan on commands", "the read scans the table:\n%s", plan)
			require.NotContains(t, plan, "Rows Removed by Filter", "the read tests commands of other nodes:\n%s", plan)
			require.Regexp(t, fmt.Sprintf(`Index Scan using commands_open_by_node on commands c(_1)? \(actual rows=1(\.00)? loops=%d\)`, read), plan,
				"the read looks each node up by key:\n%s", plan)
		})
	}
	// And ListOpenMany itself, on the pool (a batch outside any
	// transaction), answers each named node's one open command, a node
	// named twice included, on the generic plan, and leaves the
	// connection's settings as they were.
	reg, err := kinds.NewRegistry()
	require.NoError(t, err)
	open, err := New(reg, hclog.NewNullLogger()).ListOpenMany(ctx, pool, append(ids, ids[0]))
	require.NoError(t, err)
	require.Len(t, open, read)
	for _, id := range ids {
		require.Len(t, open[id], 1, id)
		require.Equal(t, "cmd_"+strings.TrimPrefix(id, "n"), open[id][0].ID)
	}
	var generic, custom int64
	var seqscan, planMode string
	require.NoError(t, pool.QueryRow(ctx, `SELECT generic_plans, custom_plans, current_setting('enable_seqscan'), current_setting('plan_cache_mode')
		FROM pg_prepared_statements WHERE statement LIKE '%LATERAL (SELECT * FROM commands c WHERE c.node_id = n.id%'`).Scan(&generic, &custom, &seqscan, &planMode))
	require.Equal(t, int64(1), generic, "read on the generic plan")
	require.Zero(t, custom, "read on a custom plan")
	require.Equal(t, "on", seqscan, "the settings ended with the read")
	require.Equal(t, "auto", planMode, "the settings ended with the read")
}
