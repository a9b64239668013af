package pgtx

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// ErrCommitUnknown wraps the error of a final batch (SendFinal) after which
// it is not known whether the transaction committed: the connection failed
// while the batch, COMMIT included, was in flight, or its results could not
// be read. The transaction's work may be stored; nothing of it may be
// acknowledged as stored.
var ErrCommitUnknown = errors.New("the transaction's commit was sent with its last statements, and whether it landed is unknown")

// Final lets the last work of a transaction send its last statements
// together with COMMIT, in one round trip (SendFinal). A group commit
// (controlplane/internal/groupcommit) gives one to the last work of a group, whose
// transaction then costs a round trip less: a gateway dispatch is BEGIN, the
// UPDATE and COMMIT in one, and commands.run's enqueue two round trips
// instead of three (BenchmarkSessions, BenchmarkRunThroughput).
type Final struct {
	state finalState
}

type finalState int

const (
	// finalUnused: SendFinal did not commit; whoever owns the transaction
	// commits it.
	finalUnused finalState = iota
	// finalCommitted: the batch and COMMIT landed.
	finalCommitted
	// finalFailed: the batch failed in the database and nothing of the
	// transaction was committed; it still needs its rollback.
	finalFailed
	// finalUnknown: see ErrCommitUnknown.
	finalUnknown
)

type finalKey struct{}

// WithFinal returns a context whose holder may commit the transaction with
// its last statements (SendFinal), and the Final that then says what came of
// it. Only one piece of work may hold it: nothing may use the transaction
// after a SendFinal that committed.
func WithFinal(ctx context.Context) (context.Context, *Final) {
	f := &Final{}
	return context.WithValue(ctx, finalKey{}, f), f
}

// HasFinal reports whether ctx carries an unused Final: whether the work
// holding it may commit with its last statements.
func HasFinal(ctx context.Context) bool {
	f, _ := ctx.Value(finalKey{}).(*Final)
	return f != nil && f.state == finalUnused
}

// Sent reports whether SendFinal sent COMMIT: the owner must not commit
// again, and when the work then failed, its commit may have landed (unless
// Failed).
func (f *Final) Sent() bool { return f.state != finalUnused }

// Committed reports whether the transaction is known to have committed.
func (f *Final) Committed() bool { return f.state == finalCommitted }

// Failed reports whether the final batch failed in the database, so that
// nothing of the transaction was committed.
func (f *Final) Failed() bool { return f.state == finalFailed }

// SendFinal sends b's statements on tx; each must read its results through
// a callback (b.Queue(...).Query, .Exec or .QueryRow with a function). When
// ctx carries an unused Final (WithFinal), COMMIT goes in the same round
// trip, after them (and BEGIN before them, when tx is this package's and
// nothing was sent yet), and the Final records the outcome: nil is
// committed; an error wrapping ErrCommitUnknown means it may have; any
// other error means nothing was committed. Without a Final it is
// tx.SendBatch(ctx, b).Close().
func SendFinal(ctx context.Context, tx pgx.Tx, b *pgx.Batch) error {
	f, _ := ctx.Value(finalKey{}).(*Final)
	if f == nil || f.state != finalUnused {
		return tx.SendBatch(ctx, b).Close()
	}
	pt, ok := tx.(*pipelinedTx)
	if !ok || pt.real != nil {
		// A transaction of pgx's own: the batch, then its commit.
		if pt != nil {
			tx = pt.real
		}
		if err := tx.SendBatch(ctx, b).Close(); err != nil {
			return err
		}
		f.state = finalUnknown
		if err := tx.Commit(ctx); err != nil {
			return fmt.Errorf("%w: %w", ErrCommitUnknown, err)
		}
		f.state = finalCommitted
		return nil
	}
	if pt.closed {
		return pgx.ErrTxClosed
	}
	withCommit := &pgx.Batch{}
	if !pt.begun {
		withCommit.Queue("begin")
	}
	withCommit.QueuedQueries = append(withCommit.QueuedQueries, b.QueuedQueries...)
	var tag pgconn.CommandTag
	withCommit.Queue("commit").Exec(func(t pgconn.CommandTag) error {
		tag = t
		return nil
	})
	pt.begun = true
	err := pt.conn.SendBatch(ctx, withCommit).Close()
	var pe *pgconn.PgError
	switch {
	case err == nil && tag.String() == "COMMIT":
		pt.closed = true
		f.state = finalCommitted
		return nil
	case err == nil:
		// COMMIT answered ROLLBACK: the transaction had failed.
		f.state = finalFailed
		return pgx.ErrTxCommitRollback
	case errors.As(err, &pe) && !pt.conn.IsClosed():
		// The database refused a statement (and skipped the rest, COMMIT
		// with them) or refused the commit: nothing is stored. The
		// transaction is left for the owner's rollback.
		f.state = finalFailed
		return err
	default:
		pt.closed = true
		f.state = finalUnknown
		pt.closeIfStuck(ctx)
		return fmt.Errorf("%w: %w", ErrCommitUnknown, err)
	}
}
