package journal

import (
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"
)

// errClosed is returned by writes after Close.
var errClosed = errors.New("journal closed")

// Checkpoint thresholds: the log's records go into the bbolt file once this
// many commands have records in the log, or once it holds this many bytes.
const (
	checkpointRecords = 512
	checkpointBytes   = 3 << 20
)

// committer is a group commit on the write-ahead log: one goroutine writes
// every write that is waiting as frames of the log and syncs it once, so
// concurrent commands share a sync instead of queueing for one each. A lone
// write is written at once (no batch delay), so the sequential path pays
// one fdatasync per synced write. The same goroutine moves the log's
// records into the bbolt file (a checkpoint) and runs Compact, so nothing
// else ever writes either file.
type committer struct {
	j    *Journal
	wal  *wal
	ops  chan *op
	done chan struct{}
	// deferWait is how long a group of deferred writes waits for a write
	// that must be synced now, to share its sync.
	deferWait time.Duration
	// onCommit is Options.OnCommit.
	onCommit func(d time.Duration, writes int)
	// ckptFailing says the last checkpoint failed (and was logged).
	ckptFailing bool

	// closeLock guards closed against a send on a closed ops channel.
	closeLock sync.RWMutex
	closed    bool
}

type opKind int

const (
	opInsert opKind = iota
	opUpdate
	opCompact
)

type op struct {
	kind opKind
	rec  Record
	// version orders the writes of one command as they were made
	// (Journal.versions): the overlay never goes back to an older one.
	version uint64
	// deferred ops do not wait for their sync (see Journal.UpdateDeferred).
	deferred bool
	now      time.Time // opCompact
	res      chan opResult
}

type opResult struct {
	stored   Record
	inserted bool
	dropped  int
	err      error
}

// maxGroup bounds one sync's writes.
const maxGroup = 256

func newCommitter(j *Journal, w *wal, deferWait time.Duration, onCommit func(time.Duration, int)) *committer {
	c := &committer{j: j, wal: w, ops: make(chan *op, maxGroup), done: make(chan struct{}), deferWait: deferWait, onCommit: onCommit}
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
			// (the next command's acceptance) a moment to share the sync.
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
		c.commit(group)
		if c.j.overlaySize() >= checkpointRecords || c.wal.off >= checkpointBytes {
			err := c.checkpoint()
			switch {
			case err != nil && !c.ckptFailing:
				// Logged once: the next groups try again, and writes
				// still land in the log meanwhile.
				c.j.logger.Error("cannot move the write-ahead log into the journal file; it keeps growing until this works", "error", err)
			case err == nil && c.ckptFailing:
				c.j.logger.Info("the write-ahead log moves into the journal file again")
			}
			c.ckptFailing = err != nil
		}
	}
	if err := c.checkpoint(); err != nil {
		c.j.logger.Error("cannot move the write-ahead log into the journal file at close; the next start replays it", "error", err)
	}
}

// commit writes group's records as frames of the log, syncs once, then
// makes them visible and answers each op. A Compact op checkpoints first
// and then drops records from the bbolt file.
func (c *committer) commit(group []*op) {
	start := time.Now()
	// staged is this group's new state per command: later ops of the
	// group read it before the overlay and the file.
	staged := map[string]entry{}
	var order []string
	// stage queues r's frame and makes it the group's newest state of its
	// command (order keeps each command's first place in the group).
	stage := func(r Record, fresh bool, version uint64) error {
		if err := c.wal.add(r); err != nil {
			return err
		}
		if _, ok := staged[r.ID]; !ok {
			order = append(order, r.ID)
		}
		staged[r.ID] = entry{rec: r, fresh: fresh, version: version}
		return nil
	}
	res := make([]opResult, len(group))
	var compacts []int
	for i, o := range group {
		switch o.kind {
		case opCompact:
			compacts = append(compacts, i)
			continue
		case opInsert:
			if prev, ok, err := c.lookup(staged, o.rec.ID); err != nil || ok {
				res[i] = opResult{stored: prev.rec, err: err}
				continue
			}
			r := o.rec
			r.Order = c.j.nextOrder
			if err := stage(r, true, o.version); err != nil {
				res[i] = opResult{err: err}
				continue
			}
			c.j.nextOrder++
			res[i] = opResult{stored: r, inserted: true}
		case opUpdate:
			prev, ok, err := c.lookup(staged, o.rec.ID)
			if err == nil && !ok {
				err = fmt.Errorf("no record of command %s", o.rec.ID)
			}
			if err != nil {
				res[i] = opResult{err: err}
				continue
			}
			r := o.rec
			r.Order = prev.rec.Order
			if err := stage(r, prev.fresh, o.version); err != nil {
				res[i] = opResult{err: err}
			}
		}
	}
	err := c.wal.flush()
	if c.onCommit != nil {
		c.onCommit(time.Since(start), len(group)-len(compacts))
	}
	if err == nil {
		c.j.publish(staged, order)
	}
	for i, o := range group {
		if o.kind == opCompact {
			continue
		}
		r := res[i]
		if err != nil && r.err == nil && (r.inserted || o.kind == opUpdate) {
			r = opResult{err: err}
		}
		if o.deferred {
			if r.err != nil {
				// It stays visible in memory; after a restart the command
				// reads as it did before this write.
				c.j.logger.Error("deferred journal write failed", "command_id", o.rec.ID, "error", r.err)
			}
			continue
		}
		o.res <- r
	}
	for _, i := range compacts {
		n, err := c.compact(group[i].now)
		group[i].res <- opResult{dropped: n, err: err}
	}
}

// lookup finds id's current state: staged in this group, in the overlay
// (in the log, not yet in the file) or in the file.
func (c *committer) lookup(staged map[string]entry, id string) (entry, bool, error) {
	if e, ok := staged[id]; ok {
		return e, true, nil
	}
	if e, ok := c.j.overlayEntry(id); ok {
		return e, true, nil
	}
	r, ok, err := c.j.getFile(id)
	return entry{rec: r}, ok, err
}

// checkpoint moves every record of the overlay into the bbolt file in one
// commit, then starts the log's next generation: the records it held are
// in the file, and a replay of them would only write them again.
func (c *committer) checkpoint() error {
	j := c.j
	j.ckpt.Lock()
	defer j.ckpt.Unlock()
	j.overlayLock.Lock()
	entries := make([]entry, 0, len(j.overlay))
	for _, e := range j.overlay {
		entries = append(entries, e)
	}
	j.overlayLock.Unlock()
	if len(entries) == 0 && c.wal.off <= c.wal.headerEnd {
		return nil
	}
	sort.Slice(entries, func(a, b int) bool { return entries[a].rec.Order < entries[b].rec.Order })
	recs := make([]Record, len(entries))
	for i, e := range entries {
		recs[i] = e.rec
	}
	if err := j.db.Update(func(tx *bolt.Tx) error { return putRecords(tx, recs, j.nextOrder-1) }); err != nil {
		return fmt.Errorf("writing %d records into %s: %w", len(recs), j.path, err)
	}
	j.overlayLock.Lock()
	clear(j.overlay)
	j.overlayLock.Unlock()
	if err := c.wal.restart(c.wal.gen + 1); err != nil {
		return fmt.Errorf("restarting the write-ahead log: %w", err)
	}
	j.logger.Trace("checkpoint", "records", len(recs))
	return nil
}

// compact checkpoints, then drops from the file the terminal records whose
// keep-until is before now (none that has a write in the overlay since).
func (c *committer) compact(now time.Time) (int, error) {
	if err := c.checkpoint(); err != nil {
		return 0, err
	}
	j := c.j
	dropped := 0
	err := j.db.Update(func(tx *bolt.Tx) error {
		dropped = 0
		cmds := tx.Bucket(bucketCommands)
		order := tx.Bucket(bucketOrder)
		var drop [][2][]byte
		err := order.ForEach(func(k, id []byte) error {
			raw := cmds.Get(id)
			if raw == nil {
				drop = append(drop, [2][]byte{append([]byte(nil), k...), nil})
				return nil
			}
			if _, ok := j.overlayEntry(string(id)); ok {
				return nil
			}
			r, err := decodeRecord(raw)
			if err != nil {
				return fmt.Errorf("record %s: %w", id, err)
			}
			if r.State.Terminal() && now.After(r.keepUntil(j.horizon)) {
				drop = append(drop, [2][]byte{append([]byte(nil), k...), append([]byte(nil), id...)})
			}
			return nil
		})
		if err != nil {
			return err
		}
		for _, d := range drop {
			if err := order.Delete(d[0]); err != nil {
				return err
			}
			if d[1] != nil {
				if err := cmds.Delete(d[1]); err != nil {
					return err
				}
				dropped++
			}
		}
		return nil
	})
	return dropped, err
}

// putRecords stores recs in tx in their order, so that a command written
// twice ends in its newest state: each under its id, with its order key
// when the file has none for it (a command inserted since the last
// checkpoint). The order bucket's sequence becomes at least seq and the
// highest order stored. Checkpoints and the replay of a log both write so.
func putRecords(tx *bolt.Tx, recs []Record, seq uint64) error {
	cmds, order := tx.Bucket(bucketCommands), tx.Bucket(bucketOrder)
	seq = max(seq, order.Sequence())
	for _, r := range recs {
		if r.Order == 0 {
			return fmt.Errorf("record of command %s has no order", r.ID)
		}
		v, err := json.Marshal(r)
		if err != nil {
			return err
		}
		if err := cmds.Put([]byte(r.ID), v); err != nil {
			return err
		}
		if order.Get(orderKey(r.Order)) == nil {
			if err := order.Put(orderKey(r.Order), []byte(r.ID)); err != nil {
				return err
			}
		}
		seq = max(seq, r.Order)
	}
	return order.SetSequence(seq)
}

// do hands o to the loop and waits for its result.
func (c *committer) do(o *op) opResult {
	o.res = make(chan opResult, 1)
	c.closeLock.RLock()
	if c.closed {
		c.closeLock.RUnlock()
		return opResult{err: errClosed}
	}
	c.ops <- o
	c.closeLock.RUnlock()
	return <-o.res
}

// enqueue hands o to the loop without waiting for its sync.
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
