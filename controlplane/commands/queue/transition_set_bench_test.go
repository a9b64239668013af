package queue_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/controlplane/commands/kinds"
	"github.com/better-compute/commands/controlplane/commands/queue"
	"github.com/better-compute/commands/controlplane/internal/storetest"
)

// transitionBenchNodes and transitionBenchGroup are a fan-out as the
// gateway stores it: 10,000 nodes' commands, in groups of 256 (a group's
// statements over arrays, queue.TransitionSet).
const (
	transitionBenchNodes = 10_000
	transitionBenchGroup = 256
	// transitionBenchRounds is how many fan-outs it measures however
	// large b.N is (make bench runs 2,000 iterations).
	transitionBenchRounds = 3
)

// BenchmarkTransitionSet measures what PostgreSQL's half of a fan-out's
// CPU (BenchmarkSessions' cpu-postgres-ns/node) is mostly spent on, without
// a fleet and its noise: each command's two stored transitions,
// dispatched then succeeded with a result, by TransitionSet in
// transactions of one group, over 10,000 pending commands (one a node,
// each node's session epoch checked) beside the same rows moved by a bare
// UPDATE of their state (and settled_at, which the table holds set exactly
// when the state is terminal) by id in the same groups (floor: no guards,
// no RETURNING, no outbox). Each round fills a fresh set of commands for both
// (so every row starts pending, in a table that grows as a fleet's does)
// and runs the two interleaved, group by group; three rounds, however
// large b.N is. It reports the time a row
// for each transition and the floor's, and their ratios; a change to the
// commands table's indexes or to the statement shows here first. Its
// figures are wall time of the client's transaction, PostgreSQL's work
// and the client's together, on an otherwise idle database.
func BenchmarkTransitionSet(b *testing.B) {
	if testing.Short() {
		b.Skip("heavy: tens of thousands of rows")
	}
	ctx := context.Background()
	pool := storetest.DB(b)
	reg, err := kinds.NewRegistry(refreshKind)
	require.NoError(b, err)
	q := queue.New(reg, hclog.NewNullLogger())
	_, err = pool.Exec(ctx, fmt.Sprintf(`INSERT INTO tenants (id) VALUES ('t_bench');
		INSERT INTO nodes (id, tenant_id, session_epoch) SELECT 'n' || g, 't_bench', 1 FROM generate_series(1, %d) g`, transitionBenchNodes))
	require.NoError(b, err)
	fill := func(round int) {
		// Two commands a node: one for TransitionSet (seq 2*round+1),
		// one for the floor (seq 2*round+2).
		_, err := pool.Exec(ctx, `INSERT INTO commands (id, tenant_id, node_id, seq, kind, lane, idempotency_key, not_after)
			SELECT v || $1::int || '_' || g, 't_bench', 'n' || g, 2 * $1::int + s, $2, 'control', v || $1::int || '_' || g, now() + interval '1 day'
			FROM generate_series(1, $3::int) g, (VALUES ('set', 1), ('bare', 2)) x(v, s)`, round, refreshKind.Kind, transitionBenchNodes)
		require.NoError(b, err)
		_, err = pool.Exec(ctx, `ANALYZE commands`)
		require.NoError(b, err)
	}
	ids := func(prefix string, round, lo, hi int) []string {
		out := make([]string, 0, hi-lo)
		for i := lo; i < hi; i++ {
			out = append(out, fmt.Sprintf("%s%d_%d", prefix, round, i+1))
		}
		return out
	}
	var set [2]time.Duration // dispatched, succeeded
	var bare [2]time.Duration
	round := 0
	for b.Loop() {
		if round == transitionBenchRounds {
			continue
		}
		fill(round)
		for step, to := range []queue.State{queue.Dispatched, queue.Succeeded} {
			for lo := 0; lo < transitionBenchNodes; lo += transitionBenchGroup {
				hi := min(transitionBenchNodes, lo+transitionBenchGroup)
				ts := make([]queue.Transition, 0, hi-lo)
				for i, id := range ids("set", round, lo, hi) {
					t := queue.Transition{CommandID: id, NodeID: fmt.Sprintf("n%d", lo+i+1), To: to, Epoch: 1}
					if to == queue.Succeeded {
						t.Result = []byte(`{"ok":true}`)
					}
					ts = append(ts, t)
				}
				t0 := time.Now()
				require.NoError(b, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
					out, err := q.TransitionSet(ctx, tx, ts)
					for i := 0; err == nil && i < len(out); i++ {
						if !out[i].Changed {
							err = fmt.Errorf("%s did not move to %s", ts[i].CommandID, to)
						}
					}
					return err
				}))
				set[step] += time.Since(t0)

				bareIDs := ids("bare", round, lo, hi)
				t0 = time.Now()
				require.NoError(b, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
					tag, err := tx.Exec(ctx, `UPDATE commands SET state = $2, updated_at = now(), settled_at = CASE WHEN $3 THEN now() END WHERE id = ANY($1)`,
						bareIDs, string(to), to.Terminal())
					if err == nil && tag.RowsAffected() != int64(len(bareIDs)) {
						err = fmt.Errorf("the floor moved %d of %d rows to %s", tag.RowsAffected(), len(bareIDs), to)
					}
					return err
				}))
				bare[step] += time.Since(t0)
			}
		}
		round++
	}
	perRow := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / float64(round*transitionBenchNodes) }
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(perRow(set[0]), "dispatched-ns/row")
	b.ReportMetric(perRow(set[1]), "succeeded-ns/row")
	b.ReportMetric(perRow(bare[0]), "floor-dispatched-ns/row")
	b.ReportMetric(perRow(bare[1]), "floor-succeeded-ns/row")
	b.ReportMetric(float64(set[0])/float64(bare[0]), "ratio-dispatched")
	b.ReportMetric(float64(set[1])/float64(bare[1]), "ratio-succeeded")
}
