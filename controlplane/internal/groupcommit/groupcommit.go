// Package groupcommit shares one transaction's commit among concurrent
// callers: each caller's statements run inside a transaction that carries
// many callers' work, and each caller is answered only after that
// transaction committed. One fdatasync and one BEGIN/COMMIT then serve a
// whole group, which is what lets one gateway store thousands of node
// reports a second; a Set (set.go) also shares the statements
// (BenchmarkSessions, BenchmarkRunThroughput).
//
// A group costs a caller nothing when it is alone: a request that finds a
// worker free starts a transaction at once; requests that arrive while
// every worker is busy wait together and go out as the next group.
//
// What a caller gets back is its own: its function's error when its own
// statements failed (the group is rolled back and run again without it, so
// that nothing of it is committed), the commit's error when the group's
// commit failed (nothing is acknowledged that may not be stored), and nil
// only once the transaction holding its work committed.
package groupcommit

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/better-compute/commands/controlplane/internal/pgtx"
)

// Func is one caller's work: statements run on tx, the group's transaction,
// with ctx (the caller's values, the group's deadline; a caller that gives
// up does not cancel the others' statements). It may run more than once (a
// group that failed is run again without the failing caller, or each
// caller alone), so it must assign its results, not accumulate them, and
// must not read them unless Do returned nil (a caller that gave up returns
// while its function may still run).
type Func func(ctx context.Context, tx pgx.Tx) error

// Options tune a Committer.
type Options struct {
	// Workers bounds the groups in flight at once (default 4): each holds
	// one pooled connection while it runs.
	Workers int
	// Spill, when set, starts a group beside the one in flight only once
	// that one has run this long: callers that arrive while a group runs
	// wait for it and go out together as the next, so groups stay large
	// (each costs the database a fixed share, whatever its size), while a
	// group held up (a row lock, a slow commit) does not hold every caller
	// behind it for longer than Spill. 0 starts a group whenever a worker
	// is free.
	Spill time.Duration
	// MaxGroup bounds the callers in one transaction (default 256), which
	// bounds how long one holds its rows locked.
	MaxGroup int
	// Timeout bounds one group's transaction, commit included (default 30s).
	Timeout time.Duration
	// Observe, when set, is told of each committed group's size (metrics).
	Observe func(size int)
	// Begin, when set, opens a group's transaction on a connection of pool
	// and returns it with the function that gives the connection back (the
	// API's begins travel with their first statement); pool.Begin when nil.
	Begin func(ctx context.Context, pool *pgxpool.Pool) (tx pgx.Tx, release func(), err error)
}

func (o *Options) defaults() {
	if o.Workers <= 0 {
		o.Workers = 4
	}
	if o.MaxGroup <= 0 {
		o.MaxGroup = 256
	}
	if o.Timeout <= 0 {
		o.Timeout = 30 * time.Second
	}
	if o.Begin == nil {
		o.Begin = func(ctx context.Context, pool *pgxpool.Pool) (pgx.Tx, func(), error) {
			tx, err := pool.Begin(ctx)
			return tx, func() {}, err
		}
	}
}

// Committer runs callers' work in shared transactions on a pool. It owns no
// goroutine while idle: a worker starts when work arrives and ends when
// none is left, so a Committer needs no Close.
type Committer struct {
	pool *pgxpool.Pool
	opts Options

	// lock guards waiting, workers and running.
	lock    sync.Mutex
	waiting []*request
	workers int
	// running holds when each group in flight began, by worker (Spill).
	running map[*worker]time.Time
}

// worker is one goroutine running groups (work). It is not zero-sized:
// pointers to distinct zero-sized values may be equal, and then every
// worker would share one entry of running.
type worker struct{ _ byte }

type request struct {
	ctx context.Context
	fn  Func
	// set and item: one item of a Set (a *setItem, which also holds
	// where the Set writes its outcome), run with the group's other items
	// of that Set in one call.
	set  setRunner
	item any
	done chan error // buffered: a worker never blocks on a caller gone
}

// New returns a Committer on pool.
func New(pool *pgxpool.Pool, opts Options) *Committer {
	opts.defaults()
	return &Committer{pool: pool, opts: opts}
}

// Do runs fn in a transaction shared with other callers and returns once
// that transaction committed (nil), or with fn's own error, or the
// transaction's. When ctx ends first Do returns ctx's error: fn's work may
// still commit, but it was not acknowledged.
func (c *Committer) Do(ctx context.Context, fn Func) error {
	return c.do(ctx, &request{ctx: ctx, fn: fn, done: make(chan error, 1)})
}

func (c *Committer) do(ctx context.Context, r *request) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c.lock.Lock()
	c.waiting = append(c.waiting, r)
	if c.workers == 0 || (c.workers < c.opts.Workers && (c.opts.Spill == 0 || c.heldUp(time.Now()))) {
		c.startWorker()
	}
	c.lock.Unlock()
	select {
	case err := <-r.done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Waiting reports how many callers wait for a worker (metrics, tests).
func (c *Committer) Waiting() int {
	c.lock.Lock()
	defer c.lock.Unlock()
	return len(c.waiting)
}

// startWorker starts a worker; c.lock is held.
func (c *Committer) startWorker() {
	c.workers++
	go c.work(&worker{})
}

// heldUp tells whether a group in flight has run longer than Spill;
// c.lock is held.
func (c *Committer) heldUp(now time.Time) bool {
	for _, began := range c.running {
		if now.Sub(began) >= c.opts.Spill {
			return true
		}
	}
	return false
}

// work runs groups until nothing waits. With Spill, a worker started
// beside a held-up group ends once no group is held up, leaving the
// callers to the worker in flight.
func (c *Committer) work(w *worker) {
	for {
		c.lock.Lock()
		n := min(len(c.waiting), c.opts.MaxGroup)
		extra := c.opts.Spill > 0 && c.workers > 1 && len(c.running) > 0 && !c.heldUp(time.Now())
		if n == 0 || extra {
			c.workers--
			c.lock.Unlock()
			return
		}
		group := make([]*request, n)
		copy(group, c.waiting)
		// Shift rather than reslice, so the backing array does not grow
		// without bound under steady load.
		rest := copy(c.waiting, c.waiting[n:])
		clear(c.waiting[rest:])
		c.waiting = c.waiting[:rest]
		var spill *time.Timer
		if c.opts.Spill > 0 {
			if c.running == nil {
				c.running = map[*worker]time.Time{}
			}
			c.running[w] = time.Now()
			// Armed even when every worker is busy: the other one may
			// end (extra) before this group has run for Spill, and then
			// this timer is what lets callers past it if it is held.
			spill = time.AfterFunc(c.opts.Spill, c.spilled)
		}
		c.lock.Unlock()
		c.run(group)
		if c.opts.Spill > 0 {
			if spill != nil {
				spill.Stop()
			}
			c.lock.Lock()
			delete(c.running, w)
			c.lock.Unlock()
		}
	}
}

// spilled runs Spill after a group began: when that group (or another)
// is still in flight and callers wait behind it, a worker starts beside it.
func (c *Committer) spilled() {
	c.lock.Lock()
	defer c.lock.Unlock()
	if len(c.waiting) > 0 && c.workers < c.opts.Workers && c.heldUp(time.Now()) {
		c.startWorker()
	}
}

// run commits group, answering each caller.
func (c *Committer) run(group []*request) {
	live := group[:0]
	for _, r := range group {
		if err := r.ctx.Err(); err != nil {
			r.done <- err // gave up before its work began: nothing of it is stored
			continue
		}
		live = append(live, r)
	}
	for len(live) > 0 {
		failed, err := c.attempt(live, true)
		switch {
		case err == nil:
			if c.opts.Observe != nil {
				c.opts.Observe(len(live))
			}
			for _, r := range live {
				r.done <- nil
			}
			return
		case failed >= 0 && !transient(err):
			// The caller's own statements failed: it gets its error and
			// the rest run again without it.
			live[failed].done <- err
			live = append(live[:failed:failed], live[failed+1:]...)
		case failed == -2:
			// The commit failed: whether it landed is unknown, so no
			// caller is acknowledged and none is run again.
			for _, r := range live {
				r.done <- err
			}
			return
		default:
			// The database failed under the group (a lost connection, a
			// deadlock, BEGIN refused): nothing committed, so each caller
			// runs alone and gets its own outcome.
			for _, r := range live {
				_, aerr := c.attempt([]*request{r}, false)
				r.done <- aerr
			}
			return
		}
	}
}

// attempt runs group in one transaction. failed is the index of the
// request whose function failed, -1 when the failure was not a caller's
// (BEGIN), and -2 when the commit failed. With fuse, the group's last Set
// may send its last statements with COMMIT (pgtx.SendFinal): a round trip
// less. A caller run alone after its group failed runs without it, so that
// it gets its statements' own outcome (EnqueueSet, for one, settles a race
// on an idempotency key there that its fused statement refuses).
func (c *Committer) attempt(group []*request, fuse bool) (failed int, err error) {
	deadline := time.Now().Add(c.opts.Timeout)
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	tx, release, err := c.opts.Begin(ctx, c.pool)
	if err != nil {
		return -1, fmt.Errorf("beginning a group transaction: %w", err)
	}
	defer release()
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	for i, r := range group {
		if r.set != nil {
			continue // runSets, below
		}
		rctx, rcancel := context.WithDeadline(context.WithoutCancel(r.ctx), deadline)
		err := r.fn(rctx, tx)
		rcancel()
		if err != nil {
			if tx.Conn().IsClosed() {
				return -1, err // the connection died under it: not its fault
			}
			return i, err
		}
	}
	var fin *pgtx.Final
	lastCtx := ctx
	if fuse {
		lastCtx, fin = pgtx.WithFinal(ctx)
	}
	if err := runSets(ctx, lastCtx, tx, group); err != nil {
		if fin != nil && fin.Sent() && !fin.Failed() {
			// COMMIT went out with the last statements and may have
			// landed: no caller is acknowledged and none is run again.
			return -2, fmt.Errorf("committing a group of %d: %w", len(group), err)
		}
		// One call for many callers: which one's item failed is not
		// known, so the group is run again with each caller alone.
		return -1, err
	}
	if fin != nil && fin.Committed() {
		return -1, nil
	}
	if err := tx.Commit(ctx); err != nil {
		return -2, fmt.Errorf("committing a group of %d: %w", len(group), err)
	}
	return -1, nil
}

// transient reports whether err is the database's trouble rather than the
// caller's statement: a connection lost or refused, a serialization failure
// or deadlock, the server shutting down, a timeout. A caller whose function
// failed so is run again alone instead of being handed the error.
func transient(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return true
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch pe.Code[:2] {
		case "08", "40", "53", "57", "58":
			return true
		}
		return false
	}
	var ce *pgconn.ConnectError
	return errors.As(err, &ce) || pgconn.SafeToRetry(err) || pgconn.Timeout(err)
}
