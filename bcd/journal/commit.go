package journal

import (
	"errors"
	"sync"

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

	// closeLock guards closed against a send on a closed ops channel.
	closeLock sync.RWMutex
	closed    bool
}

type op struct {
	fn  func(*bolt.Tx) error
	err chan error
}

// maxGroup bounds one transaction's writes.
const maxGroup = 256

func newCommitter(db *bolt.DB) *committer {
	c := &committer{db: db, ops: make(chan *op, maxGroup), done: make(chan struct{})}
	go c.loop()
	return c
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
		errs := make([]error, len(group))
		// An op that fails has written nothing that matters (each checks
		// and marshals before it puts), so the others still commit; the
		// commit's own error goes to every op.
		err := c.db.Update(func(tx *bolt.Tx) error {
			for i, o := range group {
				errs[i] = o.fn(tx)
			}
			return nil
		})
		for i, o := range group {
			if err != nil {
				o.err <- err
			} else {
				o.err <- errs[i]
			}
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

func (c *committer) close() {
	c.closeLock.Lock()
	if !c.closed {
		c.closed = true
		close(c.ops)
	}
	c.closeLock.Unlock()
	<-c.done
}
