// Package pgtx runs PostgreSQL transactions whose BEGIN travels in one
// round trip with their first statement: the control plane's hot writes
// (commands.run, the gateway's grouped reports and dispatches) are a few
// round trips each, and a separate BEGIN would be one more of them.
package pgtx

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// InTx runs fn in a transaction whose BEGIN travels in one round trip with
// fn's first statement, then commits, or rolls back when fn fails. An API
// enqueue is then two round trips (BEGIN with the enqueue, COMMIT) instead of
// three, which measurably raises commands.run's throughput (see
// BenchmarkRunThroughput).
func InTx(ctx context.Context, pool *pgxpool.Pool, fn func(pgx.Tx) error) error {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("acquiring a connection: %w", err)
	}
	defer conn.Release()
	tx := &pipelinedTx{conn: conn.Conn()}
	if err := fn(tx); err != nil {
		if rerr := tx.Rollback(ctx); rerr != nil && !errors.Is(rerr, pgx.ErrTxClosed) {
			return errors.Join(err, fmt.Errorf("rolling back: %w", rerr))
		}
		return err
	}
	return tx.Commit(ctx)
}

// Begin is a group-commit begin (groupcommit.Options.Begin): a transaction
// on a connection of pool whose BEGIN travels with its first statement, as
// InTx's, and the function that gives the connection back.
func Begin(ctx context.Context, pool *pgxpool.Pool) (pgx.Tx, func(), error) {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("acquiring a connection: %w", err)
	}
	return &pipelinedTx{conn: conn.Conn()}, conn.Release, nil
}

// pipelinedTx is a pgx.Tx that sends BEGIN together with its first Exec or
// QueryRow. Anything else that needs a transaction object of pgx's own (a
// nested Begin, LargeObjects) promotes it to a real pgx.Tx on the same
// session, which then owns Commit and Rollback.
type pipelinedTx struct {
	conn *pgx.Conn
	// real is the promoted pgx transaction, nil until promoted.
	real pgx.Tx
	// begun says BEGIN went out pipelined; closed that Commit or Rollback ran.
	begun, closed bool
}

var _ pgx.Tx = (*pipelinedTx)(nil)

// promote returns a pgx transaction on the session: a plain BEGIN when
// nothing was sent yet, else a transaction object for the one already open
// (its begin query is a no-op statement, since BEGIN went out pipelined).
func (t *pipelinedTx) promote(ctx context.Context) (pgx.Tx, error) {
	if t.real != nil {
		return t.real, nil
	}
	if t.closed {
		return nil, pgx.ErrTxClosed
	}
	opts := pgx.TxOptions{}
	if t.begun {
		opts.BeginQuery = "SELECT 1"
	}
	real, err := t.conn.BeginTx(ctx, opts)
	if err != nil {
		return nil, err
	}
	t.real, t.begun = real, true
	return real, nil
}

// Begin starts a nested transaction (a savepoint).
func (t *pipelinedTx) Begin(ctx context.Context) (pgx.Tx, error) {
	real, err := t.promote(ctx)
	if err != nil {
		return nil, err
	}
	return real.Begin(ctx)
}

// Commit commits; a transaction that never sent a statement has nothing to
// commit. As pgx's own, it reports ErrTxCommitRollback when the transaction
// had failed, and closes a connection it could not bring back to idle.
func (t *pipelinedTx) Commit(ctx context.Context) error {
	if t.real != nil {
		return t.real.Commit(ctx)
	}
	if t.closed {
		return pgx.ErrTxClosed
	}
	t.closed = true
	if !t.begun {
		return nil
	}
	tag, err := t.conn.Exec(ctx, "commit")
	if err != nil {
		t.closeIfStuck(ctx)
		return err
	}
	if tag.String() == "ROLLBACK" {
		return pgx.ErrTxCommitRollback
	}
	return nil
}

// Rollback rolls back; safe to call after Commit (ErrTxClosed).
func (t *pipelinedTx) Rollback(ctx context.Context) error {
	if t.real != nil {
		return t.real.Rollback(ctx)
	}
	if t.closed {
		return pgx.ErrTxClosed
	}
	t.closed = true
	if !t.begun {
		return nil
	}
	if _, err := t.conn.Exec(ctx, "rollback"); err != nil {
		t.closeIfStuck(ctx)
		return err
	}
	return nil
}

// closeIfStuck closes a connection left inside a transaction, so that the
// pool never hands it out again.
func (t *pipelinedTx) closeIfStuck(ctx context.Context) {
	if t.conn.PgConn().TxStatus() != 'I' {
		_ = t.conn.Close(ctx)
	}
}

// CopyFrom copies rows inside the transaction.
func (t *pipelinedTx) CopyFrom(ctx context.Context, table pgx.Identifier, columns []string, src pgx.CopyFromSource) (int64, error) {
	real, err := t.promote(ctx)
	if err != nil {
		return 0, err
	}
	return real.CopyFrom(ctx, table, columns, src)
}

// SendBatch sends a batch inside the transaction. A first batch whose
// every statement reads its results through a callback (b.Queue(...).Fn,
// run by Close) carries BEGIN ahead of them, in the same round trip; any
// other first batch begins the transaction on its own first.
func (t *pipelinedTx) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	switch {
	case t.real != nil:
		return t.real.SendBatch(ctx, b)
	case t.closed:
		return errBatch{pgx.ErrTxClosed}
	case t.begun:
		return t.conn.SendBatch(ctx, b)
	}
	callbacks := len(b.QueuedQueries) > 0
	for _, qq := range b.QueuedQueries {
		callbacks = callbacks && qq.Fn != nil
	}
	if !callbacks {
		real, err := t.promote(ctx)
		if err != nil {
			return errBatch{err}
		}
		return real.SendBatch(ctx, b)
	}
	t.begun = true
	withBegin := &pgx.Batch{}
	withBegin.Queue("begin")
	withBegin.QueuedQueries = append(withBegin.QueuedQueries, b.QueuedQueries...)
	return t.conn.SendBatch(ctx, withBegin)
}

// LargeObjects returns the large-object API of the transaction.
func (t *pipelinedTx) LargeObjects() pgx.LargeObjects {
	real, err := t.promote(context.Background())
	if err != nil {
		// pgx's interface has no error here; an unusable value fails on use.
		return pgx.LargeObjects{}
	}
	return real.LargeObjects()
}

// Prepare prepares a statement on the session.
func (t *pipelinedTx) Prepare(ctx context.Context, name, sql string) (*pgconn.StatementDescription, error) {
	if t.closed && t.real == nil {
		return nil, pgx.ErrTxClosed
	}
	return t.conn.Prepare(ctx, name, sql)
}

// Exec runs a statement; the first one carries BEGIN.
func (t *pipelinedTx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	switch {
	case t.real != nil:
		return t.real.Exec(ctx, sql, args...)
	case t.closed:
		return pgconn.CommandTag{}, pgx.ErrTxClosed
	case t.begun:
		return t.conn.Exec(ctx, sql, args...)
	}
	t.begun = true
	br := t.conn.SendBatch(ctx, beginWith(sql, args))
	if _, err := br.Exec(); err != nil {
		return pgconn.CommandTag{}, errors.Join(err, br.Close())
	}
	tag, err := br.Exec()
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	return tag, err
}

// Query runs a query; the first statement begins the transaction first.
func (t *pipelinedTx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	switch {
	case t.real != nil:
		return t.real.Query(ctx, sql, args...)
	case t.closed:
		return nil, pgx.ErrTxClosed
	case !t.begun:
		// Rows stream past the batch's lifetime, so Query is not pipelined.
		if _, err := t.promote(ctx); err != nil {
			return nil, err
		}
		return t.real.Query(ctx, sql, args...)
	}
	return t.conn.Query(ctx, sql, args...)
}

// QueryRow runs a one-row query; the first statement carries BEGIN.
func (t *pipelinedTx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	switch {
	case t.real != nil:
		return t.real.QueryRow(ctx, sql, args...)
	case t.closed:
		return errRow{pgx.ErrTxClosed}
	case t.begun:
		return t.conn.QueryRow(ctx, sql, args...)
	}
	t.begun = true
	br := t.conn.SendBatch(ctx, beginWith(sql, args))
	if _, err := br.Exec(); err != nil {
		return errRow{errors.Join(err, br.Close())}
	}
	return batchRow{br: br, row: br.QueryRow()}
}

// Conn is the session the transaction runs on.
func (t *pipelinedTx) Conn() *pgx.Conn { return t.conn }

func beginWith(sql string, args []any) *pgx.Batch {
	b := &pgx.Batch{}
	b.Queue("begin")
	b.Queue(sql, args...)
	return b
}

// batchRow closes the batch once the row is read, as pgx's own Row closes
// its rows on Scan.
type batchRow struct {
	br  pgx.BatchResults
	row pgx.Row
}

func (r batchRow) Scan(dest ...any) error {
	err := r.row.Scan(dest...)
	if cerr := r.br.Close(); err == nil {
		err = cerr
	}
	return err
}

type errRow struct{ err error }

func (r errRow) Scan(...any) error { return r.err }

type errBatch struct{ err error }

func (b errBatch) Exec() (pgconn.CommandTag, error) { return pgconn.CommandTag{}, b.err }
func (b errBatch) Query() (pgx.Rows, error)         { return nil, b.err }
func (b errBatch) QueryRow() pgx.Row                { return errRow(b) }
func (b errBatch) Close() error                     { return b.err }
func (b errBatch) Tx() pgx.Tx                       { return nil }
