package queue

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/controlplane/internal/storetest"
)

// EnqueueSet's lookups run on generic plans (byKey's too, once PostgreSQL
// finds it no dearer than a custom one), which PostgreSQL builds once per
// connection, often while the tables are still small (a new fleet, a fresh
// connection after a restart, a benchmark), and keeps until the table is
// analyzed again. A plan chosen then must still cost one probe per command
// once a node has many commands and the fleet many nodes: the idempotency
// lookup reads the (node_id, idempotency_key) key, not every command of
// the node through another index that starts with node_id, and the seq's
// UPDATE reads the nodes it bumps, not the whole nodes table. (Built on an
// empty table, the dup lookup's plan scanned all of a node's commands: 1 ms
// a call with 2,800 commands on the node, growing with each.)
func TestEnqueueSetsGenericPlansBuiltOnEmptyTablesStillProbeTheirKeys(t *testing.T) {
	pool := storetest.DB(t)
	ctx := context.Background()
	_, err := pool.Exec(ctx, `INSERT INTO tenants (id) VALUES ('t1');
		INSERT INTO nodes (id, tenant_id) VALUES ('n1', 't1'), ('n2', 't1')`)
	require.NoError(t, err)
	conn, err := pool.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()

	inGenericPlans := func(f func(tx pgx.Tx)) {
		tx, err := conn.Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(ctx) }()
		for _, s := range genericPlanSettings(true) {
			_, err := tx.Exec(ctx, s)
			require.NoError(t, err)
		}
		f(tx)
	}
	const (
		keyArgs = `('n1', 'k-new')`
		seqArgs = `(ARRAY['n1'], ARRAY['t1'], ARRAY['test.refresh'], ARRAY['k-new'], ARRAY['node'], ARRAY['{}'])`
	)
	// The plans are built on the first execution, on empty tables, as
	// EnqueueSet's are.
	_, err = conn.Exec(ctx, `PREPARE bykey AS `+byKeySQL)
	require.NoError(t, err)
	_, err = conn.Exec(ctx, `PREPARE seq AS `+enqueueSeqSQL)
	require.NoError(t, err)
	inGenericPlans(func(tx pgx.Tx) {
		_, err := tx.Exec(ctx, `EXECUTE bykey`+keyArgs)
		require.NoError(t, err)
		_, err = tx.Exec(ctx, `EXECUTE seq`+seqArgs)
		require.NoError(t, err)
	})

	// Then the node gets 20,000 commands and the fleet 5,000 more nodes,
	// with no ANALYZE between (which would plan again).
	_, err = pool.Exec(ctx, `
		INSERT INTO commands (id, tenant_id, node_id, seq, kind, lane, idempotency_key, not_after)
		SELECT 'cmd_' || g, 't1', 'n1', g, 'test.refresh', 'control', 'k' || g, now() + interval '1 day'
		FROM generate_series(1, 20000) g;
		UPDATE nodes SET next_cmd_seq = 20001 WHERE id = 'n1';
		INSERT INTO nodes (id, tenant_id) SELECT 'm' || g, 't1' FROM generate_series(1, 5000) g`)
	require.NoError(t, err)

	explain := func(tx pgx.Tx, stmt string) string {
		return explainAnalyze(t, tx, `EXECUTE `+stmt, pgx.QueryExecModeSimpleProtocol)
	}
	inGenericPlans(func(tx pgx.Tx) {
		for _, stmt := range []string{`bykey` + keyArgs, `seq` + seqArgs} {
			plan := explain(tx, stmt)
			require.Contains(t, plan, "commands_node_key_probe", "%s: the idempotency lookup reads the key:\n%s", stmt, plan)
			for _, other := range []string{"commands_node_state_seq", "commands_node_seq", "commands_open_by_node", "Seq Scan on commands"} {
				require.NotContains(t, plan, other, "%s reads a node's commands through %s:\n%s", stmt, other, plan)
			}
			require.NotContains(t, plan, "Seq Scan on nodes", "%s reads every node:\n%s", stmt, plan)
			require.NotContains(t, plan, "Rows Removed by Filter: 5", "%s:\n%s", stmt, plan)
		}
	})
}

// explainAnalyze is EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF) of stmt in tx,
// its lines joined: the plan as it ran, without the figures that vary.
func explainAnalyze(t *testing.T, tx pgx.Tx, stmt string, args ...any) string {
	t.Helper()
	rows, err := tx.Query(context.Background(), `EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF) `+stmt, args...)
	require.NoError(t, err)
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return strings.Join(lines, "\n")
}

// inPlanMode begins a transaction of pool in which PostgreSQL plans
// prepared statements as mode says (force_custom_plan, force_generic_plan);
// it is rolled back when the test ends.
func inPlanMode(t *testing.T, pool *pgxpool.Pool, mode string) pgx.Tx {
	t.Helper()
	ctx := context.Background()
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = tx.Rollback(ctx) })
	_, err = tx.Exec(ctx, `SELECT set_config('plan_cache_mode', $1, true)`, mode)
	require.NoError(t, err)
	return tx
}

// explainPrepared is the EXPLAIN (ANALYZE) of sql prepared as name (as pgx
// runs it, so that a generic plan is built without the arguments' values)
// and executed with args (SQL literals: EXPLAIN EXECUTE takes no
// parameters), planned with indexed reads as genericPlans sets them.
func explainPrepared(t *testing.T, tx pgx.Tx, name, sql, args string) string {
	t.Helper()
	ctx := context.Background()
	_, err := tx.Exec(ctx, `PREPARE `+name+` AS `+sql)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, `SELECT set_config('enable_seqscan', 'off', true)`)
	require.NoError(t, err)
	plan := explainAnalyze(t, tx, `EXECUTE `+name+`(`+args+`)`)
	_, err = tx.Exec(ctx, `SET LOCAL enable_seqscan TO DEFAULT`)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, `DEALLOCATE `+name)
	require.NoError(t, err)
	return plan
}
