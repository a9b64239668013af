package modules_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/controlplane/commands/kinds"
	"github.com/better-compute/commands/controlplane/commands/queue"
	"github.com/better-compute/commands/controlplane/internal/storetest"
	"github.com/better-compute/commands/controlplane/modules"
)

func p50(d []time.Duration) time.Duration {
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	return d[len(d)/2]
}

// BenchmarkSettleWithDurableWake measures what the owner wake costs a
// settle: a node's report settling a wf:… command (the queue opens a
// transaction, the guarded UPDATE, River's InsertManyTx, commit), against,
// interleaved on the same database in the same run, the floor: the same
// report settling a command on a queue without the hook (one statement).
// It reports both p50s and ratio = wake p50 / floor p50.
func BenchmarkSettleWithDurableWake(b *testing.B) {
	ctx := context.Background()
	pool := storetest.DB(b)
	reg, err := kinds.NewRegistry(stepKind)
	require.NoError(b, err)
	hooked, plain := queue.New(reg, hclog.NewNullLogger()), queue.New(reg, hclog.NewNullLogger())
	_, err = modules.NewHost(pool, hooked, reg, modules.HostOptions{}, wfModule{prefix: "bench-"})
	require.NoError(b, err)
	ten, err := plain.CreateTenant(ctx, pool, queue.Tenant{})
	require.NoError(b, err)
	node, err := plain.CreateNode(ctx, pool, queue.Node{TenantID: ten.ID})
	require.NoError(b, err)
	enqueue := func(key string) string {
		var c queue.Command
		require.NoError(b, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			var err error
			c, _, err = plain.Enqueue(ctx, tx, queue.EnqueueParams{NodeID: node.ID, Kind: stepKind.Kind, Payload: json.RawMessage(`{}`), IdempotencyKey: key})
			return err
		}))
		return c.ID
	}
	wake := make([]time.Duration, 0, b.N)
	floor := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		w, f := enqueue(fmt.Sprintf("wf:bench-%d:s", i)), enqueue(fmt.Sprintf("floor-%d", i))
		b.StartTimer()
		t0 := time.Now()
		_, _, err := hooked.Transition(ctx, pool, queue.Transition{CommandID: w, To: queue.Succeeded})
		require.NoError(b, err)
		t1 := time.Now()
		_, _, err = plain.Transition(ctx, pool, queue.Transition{CommandID: f, To: queue.Succeeded})
		require.NoError(b, err)
		wake, floor = append(wake, t1.Sub(t0)), append(floor, time.Since(t1))
	}
	b.StopTimer()
	var jobs int
	require.NoError(b, pool.QueryRow(ctx, `SELECT count(*) FROM river_job`).Scan(&jobs))
	require.Equal(b, b.N, jobs, "one wake per settle")
	wp, fp := p50(wake), p50(floor)
	b.ReportMetric(float64(wp.Microseconds()), "wake_p50_us")
	b.ReportMetric(float64(fp.Microseconds()), "floor_p50_us")
	b.ReportMetric(float64(wp)/float64(fp), "ratio")
}
