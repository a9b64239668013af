package queue_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/controlplane/commands/queue"
)

// BenchmarkFirstDispatchOnANewConnection measures the first dispatch (BEGIN,
// TransitionSet of one pending command to dispatched, ROLLBACK) on a new
// connection: cold, and warmed by WarmConn (bc-server's AfterConnect; its
// own time not counted), beside the floor of the same dispatch on a
// connection that has run it many times, interleaved in the same run. It
// reports the three p50s and each first dispatch's ratio to the floor. A
// run costs two connections (about 0.1 s here), so it measures at most 100
// runs however large b.N is (make bench's 2000x).
func BenchmarkFirstDispatchOnANewConnection(b *testing.B) {
	ctx := context.Background()
	pool, q, ten, node := benchNode(b)
	epoch, err := q.BeginSession(ctx, pool, node.ID)
	require.NoError(b, err)
	var c queue.Command
	require.NoError(b, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		c, _, err = q.Enqueue(ctx, tx, queue.EnqueueParams{TenantID: ten.ID, NodeID: node.ID, Kind: refreshKind.Kind,
			IdempotencyKey: "first-dispatch", NotAfter: time.Now().Add(time.Hour)})
		return err
	}))
	dispatch := func(conn *pgx.Conn) time.Duration {
		t0 := time.Now()
		tx, err := conn.Begin(ctx)
		require.NoError(b, err)
		out, err := q.TransitionSet(ctx, tx, []queue.Transition{{CommandID: c.ID, NodeID: node.ID, To: queue.Dispatched, Epoch: epoch}})
		require.NoError(b, err)
		require.True(b, out[0].Changed, "the dispatch changed the row")
		require.NoError(b, tx.Rollback(ctx)) // it stays pending for the next
		return time.Since(t0)
	}
	connect := func() *pgx.Conn {
		conn, err := pgx.ConnectConfig(ctx, pool.Config().ConnConfig.Copy())
		require.NoError(b, err)
		return conn
	}
	used := connect()
	defer used.Close(ctx)
	for range 20 {
		dispatch(used)
	}
	var cold, warmed, floor []time.Duration
	b.ResetTimer()
	for range min(b.N, 100) {
		conn := connect()
		cold = append(cold, dispatch(conn))
		require.NoError(b, conn.Close(ctx))
		conn = connect()
		b.StopTimer()
		require.NoError(b, queue.WarmConn(ctx, conn))
		b.StartTimer()
		warmed = append(warmed, dispatch(conn))
		require.NoError(b, conn.Close(ctx))
		floor = append(floor, dispatch(used))
	}
	b.StopTimer()
	c50, _ := percentiles(cold)
	w50, _ := percentiles(warmed)
	f50, _ := percentiles(floor)
	b.ReportMetric(float64(c50.Nanoseconds()), "cold-p50-ns")
	b.ReportMetric(float64(w50.Nanoseconds()), "warmed-p50-ns")
	b.ReportMetric(float64(f50.Nanoseconds()), "floor-p50-ns")
	b.ReportMetric(float64(c50)/float64(f50), "ratio-cold")
	b.ReportMetric(float64(w50)/float64(f50), "ratio-warmed")
	b.Logf("first dispatch on a new connection: cold %s, warmed %s; on a used one %s", c50, w50, f50)
}
