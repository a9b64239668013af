package api_test

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/better-compute/commands/controlplane/commands/queue"
	"github.com/better-compute/commands/controlplane/front/api"
	"github.com/better-compute/commands/controlplane/internal/ids"
	apiv1 "github.com/better-compute/commands/proto/bc/api/v1"
)

// benchClients is the number of concurrent API clients (the 8).
const benchClients = 8

// ceilingSQL is the floor under any enqueue: in one statement, bump the
// node's seq, insert the row and notify, with no API, auth, validation,
// idempotency or outbox.
const ceilingSQL = `
WITH n AS (
  UPDATE nodes SET next_cmd_seq = next_cmd_seq + 1 WHERE id = $1
  RETURNING tenant_id, next_cmd_seq - 1 AS seq
), ins AS (
  INSERT INTO commands (id, tenant_id, node_id, seq, kind, lane, not_after)
  SELECT $2, n.tenant_id, $1, n.seq, 'diag.nvml', 'control', now() + interval '10 minutes' FROM n
  RETURNING id
)
SELECT pg_notify('bc_events', id) FROM ins`

// measure runs per(client) on benchClients goroutines, each n/benchClients
// times, and returns the throughput and the sorted latencies.
func measure(b *testing.B, n int, per func(client, i int) error) (float64, []time.Duration) {
	b.Helper()
	each := max(1, n/benchClients)
	lat := make([][]time.Duration, benchClients)
	errs := make(chan error, benchClients)
	var wg sync.WaitGroup
	start := time.Now()
	for c := 0; c < benchClients; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			lat[c] = make([]time.Duration, 0, each)
			for i := 0; i < each; i++ {
				t0 := time.Now()
				if err := per(c, i); err != nil {
					errs <- err
					return
				}
				lat[c] = append(lat[c], time.Since(t0))
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	var all []time.Duration
	for _, l := range lat {
		all = append(all, l...)
	}
	sort.Slice(all, func(i, j int) bool { return all[i] < all[j] })
	return float64(len(all)) / elapsed.Seconds(), all
}

func pct(d []time.Duration, p float64) float64 {
	if len(d) == 0 {
		return 0
	}
	return float64(d[min(len(d)-1, int(float64(len(d))*p))].Nanoseconds())
}

// BenchmarkRunThroughput reports commands.run through the API (real gRPC on
// loopback, bearer-token auth, the allowlist, payload validation, the
// idempotency key and the outbox event) with 8 concurrent clients, beside the
// ceiling measured in the same run on the same database: a bare transaction
// that bumps the node's seq, inserts the row and notifies. Each client owns
// a node, as a fleet's callers mostly do.
func BenchmarkRunThroughput(b *testing.B) {
	var groups, grouped atomic.Int64
	bn := setup(b, func(c *api.Config) {
		c.RunGroup.Observe = func(n int) { groups.Add(1); grouped.Add(int64(n)) }
	})
	ctx := context.Background()
	var floorNodes, apiNodes []string
	for c := 0; c < benchClients; c++ {
		for _, set := range []*[]string{&floorNodes, &apiNodes} {
			n, err := bn.queue.CreateNode(ctx, bn.pool, queue.Node{TenantID: tenantA})
			require.NoError(b, err)
			*set = append(*set, n.ID)
		}
	}
	clients := make([]apiv1.CommandsClient, benchClients)
	for c := range clients {
		conn, err := grpc.NewClient(bn.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		require.NoError(b, err)
		b.Cleanup(func() { _ = conn.Close() })
		clients[c] = apiv1.NewCommandsClient(conn)
	}
	authCtx := as(tokOps)
	// Warm both paths: connections, prepared statements, the plan cache.
	for c := 0; c < benchClients; c++ {
		_, err := clients[c].Run(authCtx, &apiv1.RunCommandRequest{TenantId: tenantA, NodeId: apiNodes[c], Kind: "diag.nvml"})
		require.NoError(b, err)
	}

	floor := func(c, _ int) error {
		return pgx.BeginFunc(ctx, bn.pool, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, ceilingSQL, floorNodes[c], ids.NewCommand())
			return err
		})
	}
	round := 0
	run := func(c, i int) error {
		_, err := clients[c].Run(authCtx, &apiv1.RunCommandRequest{
			TenantId: tenantA, NodeId: apiNodes[c], Kind: "diag.nvml",
			IdempotencyKey: fmt.Sprintf("bench-%d-%d-%d", round, c, i), NotAfterSeconds: ptr[int32](600),
		})
		return err
	}

	// Two interleaved rounds of each, so that neither side alone pays for
	// a checkpoint, autovacuum or the tables growing under it.
	b.ResetTimer()
	var floorRate, apiRate float64
	var floorLat, apiLat []time.Duration
	for round = 0; round < 2; round++ {
		r, l := measure(b, b.N/2, floor)
		floorRate, floorLat = floorRate+r/2, append(floorLat, l...)
		r, l = measure(b, b.N/2, run)
		apiRate, apiLat = apiRate+r/2, append(apiLat, l...)
	}
	sort.Slice(floorLat, func(i, j int) bool { return floorLat[i] < floorLat[j] })
	sort.Slice(apiLat, func(i, j int) bool { return apiLat[i] < apiLat[j] })
	b.StopTimer()

	b.ReportMetric(apiRate, "runs/s")
	b.ReportMetric(float64(grouped.Load())/float64(max(groups.Load(), 1)), "runs/commit")
	b.ReportMetric(floorRate, "floor-tx/s")
	b.ReportMetric(apiRate/floorRate, "ratio")
	b.ReportMetric(pct(apiLat, 0.50), "p50-ns")
	b.ReportMetric(pct(apiLat, 0.99), "p99-ns")
	b.ReportMetric(pct(floorLat, 0.50), "floor-p50-ns")
	b.ReportMetric(pct(floorLat, 0.99), "floor-p99-ns")
}
