package queue

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// SettleHook is told of the commands a statement settled, inside the
// transaction that settled them, before it commits: what it writes (the
// module API's durable owner wake, controlplane/commands/wakes) commits or rolls back
// with the settle itself. An error rolls the settle back.
type SettleHook func(ctx context.Context, tx pgx.Tx, settled []Command) error

// OnSettle installs h on every path that settles a command: a node's report
// and a reconnect's settle (Transition), the sweeper (Sweep), a cancel of a
// pending command (Cancel) and a node's deletion (DeleteNode). Install it
// before the gateway and the sweeper start; nil removes it. Hooks added
// with AlsoOnSettle stay.
func (q *Queue) OnSettle(h SettleHook) {
	q.hookLock.Lock()
	defer q.hookLock.Unlock()
	q.primaryHook = h
	q.storeHooks()
}

// AlsoOnSettle adds h beside the hook OnSettle installs (the fleet runs'
// beside the module API's wakes): every hook runs, in the order added, in
// the settling transaction, and the first error rolls the settle back.
func (q *Queue) AlsoOnSettle(h SettleHook) {
	if h == nil {
		return
	}
	q.hookLock.Lock()
	defer q.hookLock.Unlock()
	q.extraHooks = append(q.extraHooks, h)
	q.storeHooks()
}

// storeHooks publishes the hooks as one; hookLock is held.
func (q *Queue) storeHooks() {
	hs := make([]SettleHook, 0, 1+len(q.extraHooks))
	if q.primaryHook != nil {
		hs = append(hs, q.primaryHook)
	}
	hs = append(hs, q.extraHooks...)
	switch len(hs) {
	case 0:
		q.settleHook.Store(nil)
	case 1:
		q.settleHook.Store(&hs[0])
	default:
		var all SettleHook = func(ctx context.Context, tx pgx.Tx, settled []Command) error {
			for _, h := range hs {
				if err := h(ctx, tx, settled); err != nil {
					return err
				}
			}
			return nil
		}
		q.settleHook.Store(&all)
	}
}

func (q *Queue) hook() SettleHook {
	if h := q.settleHook.Load(); h != nil {
		return *h
	}
	return nil
}

// beginner is what can open a transaction: a pool, a connection, a tx
// (a savepoint).
type beginner interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// settling runs fn in a transaction when a settle hook is installed, and
// calls the hook with what fn settled in that same transaction. db that is
// already a transaction is used as it is; without a hook fn runs on db.
func (q *Queue) settling(ctx context.Context, db DBTX, fn func(db DBTX) ([]Command, error)) error {
	h := q.hook()
	if h == nil {
		_, err := fn(db)
		return err
	}
	run := func(tx pgx.Tx) error {
		settled, err := fn(tx)
		if err != nil {
			return err
		}
		if len(settled) == 0 {
			return nil
		}
		if err := h(ctx, tx, settled); err != nil {
			return fmt.Errorf("recording what settling %d command(s) wakes: %w", len(settled), err)
		}
		return nil
	}
	if tx, ok := db.(pgx.Tx); ok {
		return run(tx)
	}
	b, ok := db.(beginner)
	if !ok {
		return errors.New("settling commands with a settle hook needs a pool or a transaction to open one on")
	}
	return pgx.BeginFunc(ctx, b, run)
}
