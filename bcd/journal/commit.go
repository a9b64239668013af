package journal

import (
	"errors"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"
)

// errClosed is returned by writes after Close.
var errClosed = errors.New("journal closed")

// committer is a group commit: one goroutine applies every write that is
// waiting in one bbolt transaction, so concurrent commands share a sync
// instead of queueing for one each. A lone write commits at once (no batch
// delay, unlike bolt.DB.Batch), so the sequential path pays one commit.
type committer struct {
	db   *bolt.DB
	ops  chan *op
	done chan struct{}
	// deferWait is how long a group of deferred writes waits for a write
	// that must be synced now, to share its commit.
	deferWait time.Duration
	// onDeferred reports the outcome of a deferred write's commit.
	onDeferred func(o *op, err error)
	// onCommit is Options.OnCommit.
	onCommit func(d time.Duration, writes int)

	// closeLock guards closed against a send on a closed ops channel.
	closeLock sync.RWMutex
	closed    bool
}

type op struct {
	fn  func(*bolt.Tx) error
	err chan error
	// deferred ops do not wait for their commit (see Journal.UpdateDeferred).
	deferred bool
	id       string
	version  uint64
}

// maxGroup bounds one transaction's writes.
const maxGroup = 256

func newCommitter(db *bolt.DB, deferWait time.Duration, onDeferred func(*op, error), onCommit func(time.Duration, int)) *committer {
	c := &committer{db: db, ops: make(chan *op, maxGroup), done: make(chan struct{}), deferWait: deferWait, onDeferred: onDeferred, onCommit: onCommit}
	go c.loop()
	return c
}

func allDeferred(group []*op) bool {
	for _, o := range group {
		if !o.deferred {
			return false
		}
	}
	return true
}

func (c *committer) loop() {
	defer close(c.done)
	for first := range c.ops {
		group := []*op{first}
	drain:
		for len(group) < maxGroup {
			select {
			case o, ok := <-c.ops:
				if !ok {
					break drain
				}
				group = append(group, o)
			default:
				break drain
			}
		}
		if allDeferred(group) && c.deferWait > 0 && len(group) < maxGroup {
			// Only deferred writes: give a write that must be synced now
			// (the next command's acceptance) a moment to share the commit.
			t := time.NewTimer(c.deferWait)
			select {
			case o, ok := <-c.ops:
				if ok {
					group = append(group, o)
				}
			case <-t.C:
			}
			t.Stop()
		}
		errs := make([]error, len(group))
		start := time.Now()
		// An op that fails has written nothing that matters (each checks
		// and marshals before it puts), so the others still commit; the
		// commit's own error goes to every op.
		err := c.db.Update(func(tx *bolt.Tx) error {
			for i, o := range group {
				errs[i] = o.fn(tx)
			}
			return nil
		})
		if c.onCommit != nil {
			c.onCommit(time.Since(start), len(group))
		}
		for i, o := range group {
			e := errs[i]
			if err != nil {
				e = err
			}
			if o.deferred {
				c.onDeferred(o, e)
				continue
			}
			o.err <- e
		}
	}
}

// do applies fn in a write transaction and returns once it is synced.
func (c *committer) do(fn func(*bolt.Tx) error) error {
	o := &op{fn: fn, err: make(chan error, 1)}
	c.closeLock.RLock()
	if c.closed {
		c.closeLock.RUnlock()
		return errClosed
	}
	c.ops <- o
	c.closeLock.RUnlock()
	return <-o.err
}

// enqueue hands o to the loop without waiting for its commit.
func (c *committer) enqueue(o *op) error {
	c.closeLock.RLock()
	defer c.closeLock.RUnlock()
	if c.closed {
		return errClosed
	}
	c.ops <- o
	return nil
}

func (c *committer) close() {
	c.closeLock.Lock()
	if !c.closed {
		c.closed = true
		close(c.ops)
	}
	c.closeLock.Unlock()
	<-c.done
}
