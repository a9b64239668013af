// Package journal is bcd's durable record of the commands it received: a
// bbolt file in the state directory with a journal id created with the file.
// A command's acceptance (Insert, Update) is committed and synced to disk before
// the call returns, so a command is journaled before it runs, and a duplicate
// delivery is answered from here after any crash. A command's outcome may be
// written with UpdateDeferred instead: it is visible at once, and it joins
// the next synced commit or is committed on its own within DeferWait (2 ms by
// default), so the warm path pays one sync per command, not two. Power lost
// inside that window leaves the command unfinished at the next start, which
// the crash rules cover (retry-safe kinds run again, the others fail
// interrupted); the control plane keeps its first terminal state. A missing
// or corrupt file means a new journal with a new id (the control plane then
// fails in-flight commands that are not retry-safe with journal-lost), never
// a crash loop.
package journal

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
)

// FileName is the journal's file in the state directory.
const FileName = "journal.db"

// DefaultReplayHorizon is how long past not_after a record is kept.
const DefaultReplayHorizon = 24 * time.Hour

var (
	bucketMeta     = []byte("meta")
	bucketCommands = []byte("commands")
	bucketOrder    = []byte("order")
	keyJournalID   = []byte("journal_id")
	keyCreatedAt   = []byte("created_at")
)

// ErrLocked is returned when another process holds the journal open.
var ErrLocked = errors.New("journal is held by another process")

// Options tune a journal.
type Options struct {
	// ReplayHorizon is how long past a command's not_after (or its finish,
	// whichever is later) its record is kept. Zero means DefaultReplayHorizon.
	ReplayHorizon time.Duration
	// LockTimeout bounds the wait for the file lock. Zero means one second.
	LockTimeout time.Duration
	// DeferWait bounds how long a deferred write (UpdateDeferred) waits for
	// a synced write to share its commit. Zero means DefaultDeferWait; a
	// negative value commits deferred writes as soon as they arrive.
	DeferWait time.Duration
	// OnCommit, when set, is told how long each group commit took (the
	// bbolt transaction with its fsync) and how many writes it carried:
	// bcd's journal commit latency metric.
	OnCommit func(d time.Duration, writes int)
}

// Journal is an open journal.
type Journal struct {
	logger  hclog.Logger
	db      *bolt.DB
	path    string
	id      string
	created bool
	corrupt string
	horizon time.Duration
	commit  *committer

	// pendingLock guards pending and version: deferred writes not yet
	// committed, which readers see in place of the stored record.
	pendingLock sync.Mutex
	pending     map[string]pendingRecord
	version     uint64
}

type pendingRecord struct {
	rec     Record
	version uint64
}

// DefaultDeferWait is how long a deferred write waits for a synced write to
// share its commit (see UpdateDeferred).
const DefaultDeferWait = 2 * time.Millisecond

// Open opens the journal in dir, creating dir and the file when needed. A
// file that bbolt cannot open, or that holds no journal id, is moved aside
// (the new name is logged and returned by CorruptPath) and a new journal is
// created in its place.
func Open(logger hclog.Logger, dir string, opts Options) (*Journal, error) {
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	logger = logger.Named("journal")
	if opts.ReplayHorizon <= 0 {
		opts.ReplayHorizon = DefaultReplayHorizon
	}
	if opts.LockTimeout <= 0 {
		opts.LockTimeout = time.Second
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("creating state directory %s: %w", dir, err)
	}
	path := filepath.Join(dir, FileName)
	j := &Journal{logger: logger.With("path", path), path: path, horizon: opts.ReplayHorizon}
	db, err := j.openFile(opts)
	if errors.Is(err, berrors.ErrTimeout) {
		return nil, fmt.Errorf("opening %s: %w", path, ErrLocked)
	}
	if err != nil {
		aside := fmt.Sprintf("%s.corrupt-%s", path, time.Now().UTC().Format("20060102T150405.000000000Z"))
		if rerr := os.Rename(path, aside); rerr != nil {
			return nil, fmt.Errorf("journal %s is unreadable (%w) and cannot be moved aside: %w", path, err, rerr)
		}
		j.logger.Error("journal is corrupt: moved aside, starting a new journal", "error", err, "moved_to", aside)
		j.corrupt = aside
		db, err = j.openFile(opts)
		if err != nil {
			return nil, fmt.Errorf("creating a new journal at %s: %w", path, err)
		}
	}
	j.db = db
	j.pending = map[string]pendingRecord{}
	wait := opts.DeferWait
	if wait == 0 {
		wait = DefaultDeferWait
	}
	j.commit = newCommitter(db, wait, j.deferredDone, opts.OnCommit)
	if j.created {
		j.logger.Info("created a new journal", "journal_id", j.id)
	} else {
		j.logger.Debug("opened journal", "journal_id", j.id)
	}
	return j, nil
}

// openFile opens the bbolt file and reads or creates the journal id. A
// panic inside bbolt while reading a damaged file counts as corruption.
func (j *Journal) openFile(opts Options) (db *bolt.DB, err error) {
	if err := preflight(j.path); err != nil {
		return nil, err
	}
	// bbolt reads its mapping without bounds checks: a damaged page makes
	// it fault. Turn faults into panics in this goroutine so the recover
	// below sees them, and read every record here, at start-up, rather than
	// in the middle of a command.
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			if db != nil {
				_ = db.Close()
			}
			db, err = nil, fmt.Errorf("reading the journal panicked: %v", r)
		}
	}()
	_, statErr := os.Stat(j.path)
	fresh := errors.Is(statErr, os.ErrNotExist)
	db, err = bolt.Open(j.path, 0o600, &bolt.Options{Timeout: opts.LockTimeout})
	if err != nil {
		return nil, err
	}
	err = db.Update(func(tx *bolt.Tx) error {
		meta := tx.Bucket(bucketMeta)
		if meta == nil || len(meta.Get(keyJournalID)) == 0 {
			if !fresh {
				return errors.New("the file holds no journal id")
			}
			var cerr error
			if meta, cerr = tx.CreateBucket(bucketMeta); cerr != nil {
				return cerr
			}
			id, cerr := newID()
			if cerr != nil {
				return cerr
			}
			if cerr := meta.Put(keyJournalID, []byte(id)); cerr != nil {
				return cerr
			}
			if cerr := meta.Put(keyCreatedAt, []byte(time.Now().UTC().Format(time.RFC3339Nano))); cerr != nil {
				return cerr
			}
			j.created = true
		}
		for _, b := range [][]byte{bucketCommands, bucketOrder} {
			if _, cerr := tx.CreateBucketIfNotExists(b); cerr != nil {
				return cerr
			}
		}
		j.id = string(meta.Get(keyJournalID))
		return walk(tx)
	})
	if err != nil {
		_ = db.Close()
		return nil, err
	}
	return db, nil
}

// walk reads and decodes every record, so that a damaged page fails Open.
func walk(tx *bolt.Tx) error {
	if err := tx.Bucket(bucketCommands).ForEach(func(k, v []byte) error {
		var r Record
		if err := json.Unmarshal(v, &r); err != nil {
			return fmt.Errorf("record %q: %w", k, err)
		}
		return nil
	}); err != nil {
		return err
	}
	return tx.Bucket(bucketOrder).ForEach(func(k, v []byte) error {
		if len(k) != 8 {
			return fmt.Errorf("order key %x: not 8 bytes", k)
		}
		return nil
	})
}

func newID() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("reading random bytes for the journal id: %w", err)
	}
	return "jrn_" + hex.EncodeToString(b[:]), nil
}

// ID returns the journal id that bcd reports in Hello.
func (j *Journal) ID() string { return j.id }

// Created reports whether this Open created the journal: a first start, or
// a journal that was missing or corrupt.
func (j *Journal) Created() bool { return j.created }

// CorruptPath is where a corrupt journal was moved, or "".
func (j *Journal) CorruptPath() string { return j.corrupt }

// Path is the journal's file.
func (j *Journal) Path() string { return j.path }

// Close stops the committer and closes the file.
func (j *Journal) Close() error {
	j.commit.close()
	if err := j.db.Close(); err != nil {
		return fmt.Errorf("closing journal: %w", err)
	}
	return nil
}

// Get returns the record of command id.
func (j *Journal) Get(id string) (Record, bool, error) {
	if rec, ok := j.overlay(id); ok {
		return rec, true, nil
	}
	var rec Record
	var found bool
	err := j.db.View(func(tx *bolt.Tx) error {
		v := tx.Bucket(bucketCommands).Get([]byte(id))
		if v == nil {
			return nil
		}
		found = true
		return json.Unmarshal(v, &rec)
	})
	if err != nil {
		return Record{}, false, fmt.Errorf("reading journal record %s: %w", id, err)
	}
	return rec, found, nil
}

// Insert stores rec unless a record with its id exists, in which case the
// stored one is returned with inserted false. It returns after the write is
// synced to disk.
func (j *Journal) Insert(rec Record) (stored Record, inserted bool, err error) {
	if rec.ID == "" {
		return Record{}, false, errors.New("journal record without a command id")
	}
	err = j.commit.do(func(tx *bolt.Tx) error {
		cmds := tx.Bucket(bucketCommands)
		if v := cmds.Get([]byte(rec.ID)); v != nil {
			return json.Unmarshal(v, &stored)
		}
		order := tx.Bucket(bucketOrder)
		n, err := order.NextSequence()
		if err != nil {
			return err
		}
		rec.Order = n
		v, err := json.Marshal(rec)
		if err != nil {
			return err
		}
		if err := order.Put(orderKey(n), []byte(rec.ID)); err != nil {
			return err
		}
		if err := cmds.Put([]byte(rec.ID), v); err != nil {
			return err
		}
		stored, inserted = rec, true
		return nil
	})
	if err != nil {
		return Record{}, false, fmt.Errorf("journaling command %s: %w", rec.ID, err)
	}
	return stored, inserted, nil
}

// Update replaces the record of rec.ID, which must exist, keeping its
// order. It returns after the write is synced to disk.
func (j *Journal) Update(rec Record) error {
	if err := j.commit.do(updateFn(rec)); err != nil {
		return fmt.Errorf("journaling command %s: %w", rec.ID, err)
	}
	return nil
}

// UpdateDeferred is Update without waiting for the sync: the write joins
// the next synced commit (the next command's acceptance, which must be on
// disk before that command runs) or is committed on its own after
// Options.DeferWait. Readers of this journal see it at once. bcd uses it for
// a command's outcome: the one write per command that need not be on disk
// before anything else happens. If the node loses power in that window the
// record reads as accepted and unfinished at the next start, the case a
// crash mid-run already is: a retry-safe kind runs again, any other fails
// with interrupted; the control plane keeps the first terminal state it
// stored and never redelivers a settled command. Close commits what is
// pending.
func (j *Journal) UpdateDeferred(rec Record) error {
	if rec.ID == "" {
		return errors.New("journal record without a command id")
	}
	j.pendingLock.Lock()
	j.version++
	v := j.version
	j.pending[rec.ID] = pendingRecord{rec: rec, version: v}
	j.pendingLock.Unlock()
	if err := j.commit.enqueue(&op{fn: updateFn(rec), deferred: true, id: rec.ID, version: v}); err != nil {
		j.pendingLock.Lock()
		if p, ok := j.pending[rec.ID]; ok && p.version == v {
			delete(j.pending, rec.ID)
		}
		j.pendingLock.Unlock()
		return fmt.Errorf("journaling command %s: %w", rec.ID, err)
	}
	return nil
}

// deferredDone is the committer's report on a deferred write.
func (j *Journal) deferredDone(o *op, err error) {
	if err != nil {
		// It stays visible in memory; on disk the command reads as unfinished.
		j.logger.Error("deferred journal write failed", "command_id", o.id, "error", err)
		return
	}
	j.pendingLock.Lock()
	defer j.pendingLock.Unlock()
	if p, ok := j.pending[o.id]; ok && p.version == o.version {
		delete(j.pending, o.id)
	}
}

// overlay returns the pending deferred record of id, if any.
func (j *Journal) overlay(id string) (Record, bool) {
	j.pendingLock.Lock()
	defer j.pendingLock.Unlock()
	p, ok := j.pending[id]
	return p.rec, ok
}

func updateFn(rec Record) func(*bolt.Tx) error {
	return func(tx *bolt.Tx) error {
		cmds := tx.Bucket(bucketCommands)
		old := cmds.Get([]byte(rec.ID))
		if old == nil {
			return fmt.Errorf("no record of command %s", rec.ID)
		}
		var prev Record
		if err := json.Unmarshal(old, &prev); err != nil {
			return err
		}
		rec.Order = prev.Order
		v, err := json.Marshal(rec)
		if err != nil {
			return err
		}
		return cmds.Put([]byte(rec.ID), v)
	}
}

// Unfinished returns the records that are accepted or running, oldest first.
func (j *Journal) Unfinished() ([]Record, error) {
	var out []Record
	err := j.scan(false, func(r Record) bool {
		if !r.State.Terminal() {
			out = append(out, r)
		}
		return true
	})
	return out, err
}

// Recent returns up to limit records, newest first (support bundles).
func (j *Journal) Recent(limit int) ([]Record, error) {
	var out []Record
	if limit <= 0 {
		return nil, nil
	}
	err := j.scan(true, func(r Record) bool {
		out = append(out, r)
		return len(out) < limit
	})
	return out, err
}

// scan calls fn on records in insertion order (or reversed) until it
// returns false.
func (j *Journal) scan(newestFirst bool, fn func(Record) bool) error {
	err := j.db.View(func(tx *bolt.Tx) error {
		cmds := tx.Bucket(bucketCommands)
		c := tx.Bucket(bucketOrder).Cursor()
		k, v := c.First()
		next := c.Next
		if newestFirst {
			k, v = c.Last()
			next = c.Prev
		}
		for ; k != nil; k, v = next() {
			raw := cmds.Get(v)
			if raw == nil {
				continue
			}
			var r Record
			if p, ok := j.overlay(string(v)); ok {
				r = p
			} else if err := json.Unmarshal(raw, &r); err != nil {
				return fmt.Errorf("record %s: %w", v, err)
			}
			if !fn(r) {
				return nil
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("reading the journal: %w", err)
	}
	return nil
}

// Compact drops terminal records whose not_after (or finish) plus the replay
// horizon is before now, and returns how many it dropped. Unfinished records
// are never dropped: Recover resolves them.
func (j *Journal) Compact(now time.Time) (int, error) {
	dropped := 0
	err := j.commit.do(func(tx *bolt.Tx) error {
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
			var r Record
			if err := json.Unmarshal(raw, &r); err != nil {
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
	if err != nil {
		return 0, fmt.Errorf("compacting the journal: %w", err)
	}
	if dropped > 0 {
		j.logger.Debug("compacted journal", "dropped", dropped)
	}
	return dropped, nil
}

func orderKey(n uint64) []byte {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], n)
	return b[:]
}
