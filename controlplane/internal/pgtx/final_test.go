package pgtx

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/controlplane/internal/storetest"
)

// trips counts what a pool's connections send: each query (one round trip)
// and each batch (one round trip, whatever it holds).
type trips struct{ queries, batches atomic.Int64 }

func (tr *trips) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	tr.queries.Add(1)
	return ctx
}
func (tr *trips) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
func (tr *trips) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	tr.batches.Add(1)
	return ctx
}
func (tr *trips) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}
func (tr *trips) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData)     {}

func (tr *trips) reset() (queries, batches int64) {
	return tr.queries.Swap(0), tr.batches.Swap(0)
}

func finalPool(t *testing.T) (*pgxpool.Pool, *trips) {
	t.Helper()
	tr := &trips{}
	pool := storetest.DBConfig(t, func(c *pgxpool.Config) {
		c.MaxConns = 1
		c.ConnConfig.Tracer = tr
	})
	_, err := pool.Exec(context.Background(), `CREATE TABLE t (v int PRIMARY KEY)`)
	require.NoError(t, err)
	return pool, tr
}

func insertBatch(vs ...int) (*pgx.Batch, *[]int) {
	got := &[]int{}
	b := &pgx.Batch{}
	for _, v := range vs {
		b.Queue(`INSERT INTO t VALUES ($1) RETURNING v`, v).QueryRow(func(r pgx.Row) error {
			var v int
			err := r.Scan(&v)
			*got = append(*got, v)
			return err
		})
	}
	return b, got
}

// A transaction's last statements sent with its Final commit with them:
// BEGIN, the statements and COMMIT in one round trip, and nothing left for
// the owner to commit.
func TestSendFinalCommitsInTheSameRoundTrip(t *testing.T) {
	t.Parallel()
	pool, tr := finalPool(t)
	ctx := context.Background()

	tx, release, err := Begin(ctx, pool)
	require.NoError(t, err)
	fctx, fin := WithFinal(ctx)
	require.True(t, HasFinal(fctx))
	require.False(t, HasFinal(ctx))
	tr.reset()
	b, got := insertBatch(1, 2)
	require.NoError(t, SendFinal(fctx, tx, b))
	require.Equal(t, []int{1, 2}, *got, "each statement's callback ran")
	q, n := tr.reset()
	require.Equal(t, int64(0), q, "no statement of its own: not BEGIN, not COMMIT")
	require.Equal(t, int64(1), n, "one round trip")
	require.True(t, fin.Sent())
	require.True(t, fin.Committed())
	require.False(t, HasFinal(fctx), "a Final serves once")
	require.ErrorIs(t, tx.Commit(ctx), pgx.ErrTxClosed, "nothing left to commit")
	release()
	require.Equal(t, 2, count(t, pool))

	// After statements of its own (BEGIN went with the first), the final
	// batch carries COMMIT alone with its statements.
	tx, release, err = Begin(ctx, pool)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, `INSERT INTO t VALUES (3)`)
	require.NoError(t, err)
	fctx, fin = WithFinal(ctx)
	b, _ = insertBatch(4)
	require.NoError(t, SendFinal(fctx, tx, b))
	require.True(t, fin.Committed())
	release()
	require.ErrorIs(t, tx.Rollback(ctx), pgx.ErrTxClosed, "committed: nothing to roll back")
	require.Equal(t, 4, count(t, pool))

	// Without a Final it is a plain batch: the owner still commits or
	// rolls back.
	tx, release, err = Begin(ctx, pool)
	require.NoError(t, err)
	b, _ = insertBatch(5)
	require.NoError(t, SendFinal(ctx, tx, b))
	require.NoError(t, tx.Rollback(ctx))
	release()
	require.Equal(t, 4, count(t, pool), "rolled back: no commit went with it")

	// On a transaction of pgx's own the batch and the commit are two round
	// trips, with the same outcome.
	ptx, err := pool.Begin(ctx)
	require.NoError(t, err)
	fctx, fin = WithFinal(ctx)
	b, _ = insertBatch(6)
	require.NoError(t, SendFinal(fctx, ptx, b))
	require.True(t, fin.Committed())
	require.Equal(t, 5, count(t, pool))
}

// A statement the database refuses fails the batch and nothing is
// committed: the error is the database's (not ErrCommitUnknown), the
// Final says Failed, and the owner's rollback brings the connection back.
func TestSendFinalWhoseStatementFailsCommitsNothing(t *testing.T) {
	t.Parallel()
	pool, _ := finalPool(t)
	ctx := context.Background()
	_, err := pool.Exec(ctx, `INSERT INTO t VALUES (1)`)
	require.NoError(t, err)

	tx, release, err := Begin(ctx, pool)
	require.NoError(t, err)
	fctx, fin := WithFinal(ctx)
	b, _ := insertBatch(2, 1) // 1 exists: unique_violation after 2
	err = SendFinal(fctx, tx, b)
	var pe *pgconn.PgError
	require.ErrorAs(t, err, &pe)
	require.Equal(t, "23505", pe.Code)
	require.NotErrorIs(t, err, ErrCommitUnknown)
	require.True(t, fin.Sent())
	require.True(t, fin.Failed())
	require.False(t, fin.Committed())
	require.NoError(t, tx.Rollback(ctx))
	release()
	require.Equal(t, 1, count(t, pool), "2 was not committed")
}

// A connection lost under the final batch leaves the commit's outcome
// unknown: the error wraps ErrCommitUnknown and the Final is Sent but
// neither Committed nor Failed, so that nothing is acknowledged.
func TestSendFinalOnALostConnectionIsUnknown(t *testing.T) {
	t.Parallel()
	pool, _ := finalPool(t)
	admin := storetest.DB(t)
	ctx := context.Background()
	_, err := admin.Exec(ctx, `SELECT 1`)
	require.NoError(t, err)

	tx, release, err := Begin(ctx, pool)
	require.NoError(t, err)
	defer release()
	var pid int
	require.NoError(t, tx.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid))
	_, err = admin.Exec(ctx, `SELECT pg_terminate_backend($1)`, pid)
	require.NoError(t, err)
	fctx, fin := WithFinal(ctx)
	b, _ := insertBatch(7)
	err = SendFinal(fctx, tx, b)
	require.ErrorIs(t, err, ErrCommitUnknown)
	require.True(t, fin.Sent())
	require.False(t, fin.Committed())
	require.False(t, fin.Failed())
	require.True(t, errors.Is(tx.Commit(ctx), pgx.ErrTxClosed))
}
