package pgtx

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/controlplane/internal/storetest"
)

func txPool(t *testing.T) *pgxpool.Pool {
	t.Helper()
	pool := storetest.DBConfig(t, func(c *pgxpool.Config) { c.MaxConns = 1 })
	_, err := pool.Exec(context.Background(), `CREATE TABLE t (v int PRIMARY KEY)`)
	require.NoError(t, err)
	return pool
}

func count(t *testing.T, pool *pgxpool.Pool) int {
	t.Helper()
	var n int
	require.NoError(t, pool.QueryRow(context.Background(), `SELECT count(*) FROM t`).Scan(&n))
	return n
}

// With one connection in the pool, every later query also proves that the
// connection went back idle, outside any transaction.
func TestPipelinedTx(t *testing.T) {
	t.Parallel()
	pool := txPool(t)
	ctx := context.Background()

	// QueryRow first, then Exec: both commit together.
	require.NoError(t, InTx(ctx, pool, func(tx pgx.Tx) error {
		var v int
		if err := tx.QueryRow(ctx, `INSERT INTO t VALUES (1) RETURNING v`).Scan(&v); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `INSERT INTO t VALUES ($1)`, v+1)
		return err
	}))
	require.Equal(t, 2, count(t, pool))

	// Exec first; fn fails: everything rolls back.
	boom := errors.New("boom")
	err := InTx(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO t VALUES (3)`); err != nil {
			return err
		}
		return boom
	})
	require.ErrorIs(t, err, boom)
	require.Equal(t, 2, count(t, pool))

	// A failing first statement is reported and rolled back.
	err = InTx(ctx, pool, func(tx pgx.Tx) error {
		var v int
		return tx.QueryRow(ctx, `INSERT INTO t VALUES (1) RETURNING v`).Scan(&v)
	})
	var pe *pgconn.PgError
	require.ErrorAs(t, err, &pe)
	require.Equal(t, "23505", pe.Code)

	// Committing a transaction whose statement failed is ErrTxCommitRollback.
	err = InTx(ctx, pool, func(tx pgx.Tx) error {
		_, _ = tx.Exec(ctx, `INSERT INTO t VALUES (1)`)
		return nil
	})
	require.ErrorIs(t, err, pgx.ErrTxCommitRollback)

	// Nothing sent: nothing to commit.
	require.NoError(t, InTx(ctx, pool, func(pgx.Tx) error { return nil }))

	// A nested transaction after the pipelined BEGIN promotes to pgx's own.
	require.NoError(t, InTx(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO t VALUES (10)`); err != nil {
			return err
		}
		sp, err := tx.Begin(ctx)
		if err != nil {
			return err
		}
		if _, err := sp.Exec(ctx, `INSERT INTO t VALUES (11)`); err != nil {
			return err
		}
		if err := sp.Rollback(ctx); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `INSERT INTO t VALUES (12)`)
		return err
	}))
	require.Equal(t, 4, count(t, pool), "10 and 12, not the rolled-back savepoint's 11")

	// Query first (not pipelined) and a batch inside.
	require.NoError(t, InTx(ctx, pool, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `SELECT v FROM t ORDER BY v`)
		if err != nil {
			return err
		}
		vs, err := pgx.CollectRows(rows, pgx.RowTo[int])
		if err != nil {
			return err
		}
		require.Equal(t, []int{1, 2, 10, 12}, vs)
		b := &pgx.Batch{}
		b.Queue(`INSERT INTO t VALUES (20)`)
		return tx.SendBatch(ctx, b).Close()
	}))
	require.Equal(t, 5, count(t, pool))

	// A first batch of callbacks carries BEGIN: its statements are inside
	// the transaction (a failure after them rolls them back), and results
	// reach each callback in order.
	var got []int
	err = InTx(ctx, pool, func(tx pgx.Tx) error {
		b := &pgx.Batch{}
		b.Queue(`INSERT INTO t VALUES (30) RETURNING v`).QueryRow(func(r pgx.Row) error {
			var v int
			err := r.Scan(&v)
			got = append(got, v)
			return err
		})
		b.Queue(`SELECT count(*) FROM t`).QueryRow(func(r pgx.Row) error {
			var v int
			err := r.Scan(&v)
			got = append(got, v)
			return err
		})
		if err := tx.SendBatch(ctx, b).Close(); err != nil {
			return err
		}
		return boom
	})
	require.ErrorIs(t, err, boom)
	require.Equal(t, []int{30, 6}, got)
	require.Equal(t, 5, count(t, pool), "the batch ran inside the rolled-back transaction")

	// Closed transactions refuse further use.
	tx := &pipelinedTx{}
	require.NoError(t, tx.Rollback(ctx))
	require.ErrorIs(t, tx.Commit(ctx), pgx.ErrTxClosed)
	require.ErrorIs(t, tx.QueryRow(ctx, "select 1").Scan(), pgx.ErrTxClosed)
	_, err = tx.Exec(ctx, "select 1")
	require.ErrorIs(t, err, pgx.ErrTxClosed)
}
