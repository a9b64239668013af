package queue_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/better-compute/commands/controlplane/commands/kinds"
	"github.com/better-compute/commands/controlplane/commands/queue"
	"github.com/better-compute/commands/controlplane/internal/ids"
	"github.com/better-compute/commands/controlplane/internal/storetest"
	"github.com/better-compute/commands/controlplane/trust/signing"
	"github.com/better-compute/commands/internal/trust"
	"github.com/hashicorp/go-hclog"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
)

// ceilingSQL is the floor under any enqueue: one statement that bumps the
// node's seq, inserts the row and notifies, with no validation, no
// idempotency handling and no outbox.
const ceilingSQL = `
WITH n AS (UPDATE nodes SET next_cmd_seq = next_cmd_seq + 1 WHERE id = $1 RETURNING tenant_id, next_cmd_seq - 1 AS seq),
ins AS (INSERT INTO commands (id, tenant_id, node_id, seq, kind, lane, payload, idempotency_key, not_after)
  SELECT $2, n.tenant_id, $1, n.seq, 'test.refresh', 'control', $3, $4, now() + interval '5 minutes' FROM n RETURNING id)
SELECT pg_notify('bc_events', id) FROM ins`

// BenchmarkEnqueue measures Enqueue in its own transaction (begin, enqueue,
// commit) and, interleaved on the same database in the same run, the
// ceiling: a bare transaction that bumps the seq, inserts the row and
// notifies. It reports both latencies' p50 and p99 and ratio = enqueue p50 /
// ceiling p50 (1.0 is as fast as the ceiling).
func BenchmarkEnqueue(b *testing.B) {
	ctx := context.Background()
	pool, q, ten, node := benchNode(b)
	floorNode, err := q.CreateNode(ctx, pool, queue.Node{TenantID: ten.ID})
	require.NoError(b, err)
	payload := json.RawMessage(`{"sections":["gpus"],"rescan":true}`)

	enq := make([]time.Duration, 0, b.N)
	floor := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		key := fmt.Sprintf("bench-%d", i)
		t0 := time.Now()
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			_, _, err := q.Enqueue(ctx, tx, queue.EnqueueParams{
				TenantID: ten.ID, NodeID: node.ID, Kind: refreshKind.Kind, Payload: payload,
				IdempotencyKey: key, NotAfter: time.Now().Add(5 * time.Minute),
			})
			return err
		})
		enq = append(enq, time.Since(t0))
		if err != nil {
			b.Fatal(err)
		}

		t0 = time.Now()
		err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, ceilingSQL, floorNode.ID, ids.NewCommand(), payload, key)
			return err
		})
		floor = append(floor, time.Since(t0))
		if err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	p50, p99 := percentiles(enq)
	f50, f99 := percentiles(floor)
	b.ReportMetric(float64(p50.Nanoseconds()), "p50-ns")
	b.ReportMetric(float64(p99.Nanoseconds()), "p99-ns")
	b.ReportMetric(float64(f50.Nanoseconds()), "floor-p50-ns")
	b.ReportMetric(float64(f99.Nanoseconds()), "floor-p99-ns")
	b.ReportMetric(float64(p50)/float64(f50), "ratio")
}

// benchNode is a benchmark's database of its own, a queue of refreshKind,
// and one tenant with one node.
func benchNode(b *testing.B) (*pgxpool.Pool, *queue.Queue, queue.Tenant, queue.Node) {
	b.Helper()
	ctx := context.Background()
	pool := storetest.DB(b)
	reg, err := kinds.NewRegistry(refreshKind)
	require.NoError(b, err)
	q := queue.New(reg, hclog.NewNullLogger())
	ten, err := q.CreateTenant(ctx, pool, queue.Tenant{})
	require.NoError(b, err)
	node, err := q.CreateNode(ctx, pool, queue.Node{TenantID: ten.ID})
	require.NoError(b, err)
	return pool, q, ten, node
}

func percentiles(d []time.Duration) (p50, p99 time.Duration) {
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	if len(s) == 0 {
		return 0, 0
	}
	return s[len(s)*50/100], s[min(len(s)-1, len(s)*99/100)]
}

// BenchmarkEnqueueSigned measures Enqueue with command signing on (an
// Ed25519 signature by the worker key over the stored bytes, in the enqueue
// transaction) beside Enqueue without it, interleaved on one database in the
// same run. ratio = signed p50 / unsigned p50; the target is at most 1.2.
func BenchmarkEnqueueSigned(b *testing.B) {
	ctx := context.Background()
	pool := storetest.DB(b)
	reg, err := kinds.NewRegistry(refreshKind)
	require.NoError(b, err)
	_, root, err := trust.NewEd25519()
	require.NoError(b, err)
	auth, err := signing.New(root, signing.Options{})
	require.NoError(b, err)
	signed := queue.New(reg, hclog.NewNullLogger())
	signed.SetSigner(auth)
	unsigned := queue.New(reg, hclog.NewNullLogger())
	ten, err := signed.CreateTenant(ctx, pool, queue.Tenant{})
	require.NoError(b, err)
	nodeS, err := signed.CreateNode(ctx, pool, queue.Node{TenantID: ten.ID})
	require.NoError(b, err)
	nodeU, err := signed.CreateNode(ctx, pool, queue.Node{TenantID: ten.ID})
	require.NoError(b, err)
	payload := json.RawMessage(`{"sections":["gpus"],"rescan":true}`)
	enqueue := func(q *queue.Queue, node, key string) time.Duration {
		t0 := time.Now()
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			_, _, err := q.Enqueue(ctx, tx, queue.EnqueueParams{TenantID: ten.ID, NodeID: node, Kind: refreshKind.Kind, Payload: payload,
				IdempotencyKey: key, NotAfter: time.Now().Add(5 * time.Minute)})
			return err
		})
		if err != nil {
			b.Fatal(err)
		}
		return time.Since(t0)
	}
	s := make([]time.Duration, 0, b.N)
	u := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		key := fmt.Sprintf("bench-%d", i)
		s = append(s, enqueue(signed, nodeS.ID, key))
		u = append(u, enqueue(unsigned, nodeU.ID, key))
	}
	b.StopTimer()
	s50, s99 := percentiles(s)
	u50, u99 := percentiles(u)
	b.ReportMetric(float64(s50.Nanoseconds()), "signed-p50-ns")
	b.ReportMetric(float64(s99.Nanoseconds()), "signed-p99-ns")
	b.ReportMetric(float64(u50.Nanoseconds()), "unsigned-p50-ns")
	b.ReportMetric(float64(u99.Nanoseconds()), "unsigned-p99-ns")
	b.ReportMetric(float64(s50)/float64(u50), "ratio")
}
