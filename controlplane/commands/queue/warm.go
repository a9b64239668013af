package queue

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// warmNode and warmCommand name no node and no command: Warm's statements
// match no row.
const (
	warmNode    = "warm-no-such-node"
	warmCommand = "warm-no-such-command"
)

// WarmConn is a pgxpool AfterConnect: it warms a new connection (Warm)
// and fails it only when warming left it unusable (closed, or inside a
// transaction), since a connection that did not warm still works. It
// needs no Queue: the statements it runs read no registry, and match no
// row.
func WarmConn(ctx context.Context, conn *pgx.Conn) error {
	err := (&Queue{}).Warm(ctx, conn)
	if err != nil && (conn.IsClosed() || conn.PgConn().TxStatus() != 'I') {
		// Cut short (the acquirer gave up) and not back to idle: the
		// pool must not hand it out.
		return err
	}
	return nil
}

// Warm runs, on a new connection, the statements that a node's command
// waits on between its commit and its dispatch (the gateway's read of open
// commands, its transition to dispatched, its sweep of idle sessions), in a
// transaction it rolls back, matching no row. A database backend's first run
// of a statement costs far more than the next ones (pgx prepares it, the
// backend plans it and loads the catalog entries of every table and index
// it touches): in BenchmarkSessions the first dispatches over a gateway's
// new connections took 10 to 24 ms to store against 1.3 ms for the next
// ones, and were among the worst samples of its dispatch latency; in
// BenchmarkFirstDispatchOnANewConnection a cold first dispatch takes about
// 25 ms and a warmed one 5. Run from the pool's AfterConnect (WarmConn;
// store.OpenConfig runs it once the schema is migrated), a new connection
// pays that once, before it serves anyone.
func (q *Queue) Warm(ctx context.Context, conn *pgx.Conn) error {
	if err := q.warm(ctx, conn); err != nil {
		return fmt.Errorf("warming a connection: %w", err)
	}
	return nil
}

func (q *Queue) warm(ctx context.Context, conn *pgx.Conn) error {
	tx, err := conn.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if _, err := q.ListOpenMany(ctx, tx, []string{warmNode}); err != nil {
		return err
	}
	if _, err := q.NodesWithOpen(ctx, tx, []string{warmNode}); err != nil {
		return err
	}
	_, err = q.TransitionSet(ctx, tx, []Transition{{CommandID: warmCommand, NodeID: warmNode, To: Dispatched}})
	return err
}
