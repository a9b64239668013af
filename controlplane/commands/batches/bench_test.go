package batches_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/controlplane/commands/batches"
	"github.com/better-compute/commands/controlplane/commands/kinds"
	"github.com/better-compute/commands/controlplane/commands/queue"
	"github.com/better-compute/commands/controlplane/internal/storetest"
	"github.com/better-compute/commands/internal/trust"
)

// BenchmarkCreate1000Leaves measures batch creation for 1,000 leaves (the
// scope sorted, hashed into an RFC 6962 tree, the statement encoded, the
// row and its event written in one transaction) beside the floor: the same
// row inserted bare in a transaction of its own, in the same run.
func BenchmarkCreate1000Leaves(b *testing.B) {
	ctx := context.Background()
	pool := storetest.DB(b)
	reg, err := kinds.NewRegistry()
	require.NoError(b, err)
	q := queue.New(reg, nil)
	ten, err := q.CreateTenant(ctx, pool, queue.Tenant{Name: "bench"})
	require.NoError(b, err)
	var scope []batches.Leaf
	for i := 0; i < 1000; i++ {
		scope = append(scope, batches.Leaf{Subject: fmt.Sprintf("node_%04d", i), Kind: "node.reboot"})
	}
	alicePub, _, err := trust.NewEd25519()
	require.NoError(b, err)
	quorum := batches.Quorum{Approvers: []trust.Approver{{Name: "alice", PublicKey: alicePub}}, Threshold: 1}
	var create, bare time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			_, _, err := batches.Create(ctx, tx, quorum, batches.CreateParams{TenantID: ten.ID, Requester: "ops", Reason: "bench", Scope: scope}, time.Now())
			return err
		})
		create += time.Since(t0)
		require.NoError(b, err)
		t0 = time.Now()
		err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, `INSERT INTO command_batches (id, tenant_id, requester, reason, scope, tree_size, root_hash, statement, deadline)
				VALUES ($1, $2, 'ops', 'bench', '[]', 1000, '\x00', '\x00', now())`, fmt.Sprintf("batch_bare_%d", i), ten.ID)
			return err
		})
		bare += time.Since(t0)
		require.NoError(b, err)
	}
	b.ReportMetric(float64(create.Nanoseconds())/float64(b.N), "create-ns")
	b.ReportMetric(float64(bare.Nanoseconds())/float64(b.N), "bare-insert-ns")
	b.ReportMetric(float64(create)/float64(bare), "ratio")
}
