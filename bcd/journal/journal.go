// Package journal is bcd's durable record of the commands it received: a
// bbolt file in the state directory with a journal id created with the file,
// and its write-ahead log (wal.go). A command's acceptance (Insert, Update)
// is in the log and synced to disk before the call returns, so a command is
// journaled before it runs, and a duplicate delivery is answered from here
// after any crash; the log's records move into the bbolt file hundreds at a
// time. A write then costs one fdatasync where a bbolt commit of its own cost
// two and more pages (BenchmarkInsertThenUpdate, BenchmarkWarmPath). A
// command's outcome may be written with UpdateDeferred instead: it is
// visible at once, and it joins the next synced write or is synced on its
// own within DeferWait (2 ms by default), so the warm path pays one sync per
// command, not two. Power lost
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
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
)

// FileName is the journal's file in the state directory.
const FileName = "journal.db"

// CopyFiles copies the journal's files in from (FileName and, when there
// is one, WALName) into to, as they are: what a restart would open. It
// reports false when from holds no journal file. bcd self-check opens such
// a copy to read the journal a running bcd holds.
func CopyFiles(from, to string) (bool, error) {
	// The log first: a checkpoint between the two reads then leaves the
	// copy an older log over a newer file, which holds every record (at
	// worst one in an older state); the other order would lose the records
	// the checkpoint moved from the log into the file.
	for _, name := range []string{WALName, FileName} {
		b, err := os.ReadFile(filepath.Join(from, name))
		if errors.Is(err, os.ErrNotExist) {
			if name == FileName {
				return false, nil
			}
			continue
		}
		if err != nil {
			return false, fmt.Errorf("copying the journal: %w", err)
		}
		if err := os.WriteFile(filepath.Join(to, name), b, 0o600); err != nil {
			return false, fmt.Errorf("copying the journal: %w", err)
		}
	}
	return true, nil
}

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
	// log's write with its fdatasync) and how many writes it carried:
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

	// ckpt is held for writing while a checkpoint moves the overlay into
	// the file, and for reading by whoever reads both, so that a record is
	// always in one or the other.
	ckpt sync.RWMutex
	// overlayLock guards overlay: each command's newest state that is in
	// the write-ahead log (or, deferred, on its way there) and not yet in
	// the bbolt file. Readers see it in place of the file's.
	overlayLock sync.Mutex
	overlay     map[string]entry
	// versions numbers writes as they are made (op.version).
	versions atomic.Uint64
	// nextOrder is the next insertion order; the committer's alone once
	// open.
	nextOrder uint64
}

// entry is a command's state in the overlay. fresh says it was inserted
// since the last checkpoint: the file has no record of it yet.
type entry struct {
	rec     Record
	fresh   bool
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
	j.overlay = map[string]entry{}
	w, err := j.openLog(dir)
	if err != nil {
		_ = db.Close()
		return nil, err
	}
	if err := db.View(func(tx *bolt.Tx) error {
		j.nextOrder = tx.Bucket(bucketOrder).Sequence() + 1
		return nil
	}); err != nil {
		_ = w.close()
		_ = db.Close()
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	wait := opts.DeferWait
	if wait == 0 {
		wait = DefaultDeferWait
	}
	j.commit = newCommitter(j, w, wait, opts.OnCommit)
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
	if err := j.commit.wal.close(); err != nil {
		_ = j.db.Close()
		return fmt.Errorf("closing the write-ahead log: %w", err)
	}
	if err := j.db.Close(); err != nil {
		return fmt.Errorf("closing journal: %w", err)
	}
	return nil
}

// Get returns the record of command id.
func (j *Journal) Get(id string) (Record, bool, error) {
	j.ckpt.RLock()
	defer j.ckpt.RUnlock()
	if e, ok := j.overlayEntry(id); ok {
		return e.rec, true, nil
	}
	rec, ok, err := j.getFile(id)
	if err != nil {
		return Record{}, false, fmt.Errorf("reading journal record %s: %w", id, err)
	}
	return rec, ok, nil
}

// getFile reads id's record from the bbolt file alone.
func (j *Journal) getFile(id string) (Record, bool, error) {
	var rec Record
	var found bool
	err := j.db.View(func(tx *bolt.Tx) error {
		v := tx.Bucket(bucketCommands).Get([]byte(id))
		if v == nil {
			return nil
		}
		found = true
		var err error
		rec, err = decodeRecord(v)
		return err
	})
	return rec, found, err
}

// Insert stores rec unless a record with its id exists, in which case the
// stored one is returned with inserted false. It returns after the write is
// synced to disk.
func (j *Journal) Insert(rec Record) (stored Record, inserted bool, err error) {
	if rec.ID == "" {
		return Record{}, false, errors.New("journal record without a command id")
	}
	r := j.commit.do(&op{kind: opInsert, rec: rec, version: j.versions.Add(1)})
	if r.err != nil {
		return Record{}, false, fmt.Errorf("journaling command %s: %w", rec.ID, r.err)
	}
	return r.stored, r.inserted, nil
}

// Update replaces the record of rec.ID, which must exist, keeping its
// order. It returns after the write is synced to disk.
func (j *Journal) Update(rec Record) error {
	if r := j.commit.do(&op{kind: opUpdate, rec: rec, version: j.versions.Add(1)}); r.err != nil {
		return fmt.Errorf("journaling command %s: %w", rec.ID, r.err)
	}
	return nil
}

// UpdateDeferred is Update without waiting for the sync: the write joins
// the next synced write (the next command's acceptance, which must be on
// disk before that command runs) or is synced on its own after
// Options.DeferWait. Readers of this journal see it at once. bcd uses it for
// a command's outcome: the one write per command that need not be on disk
// before anything else happens. If the node loses power in that window the
// record reads as accepted and unfinished at the next start, the case a
// crash mid-run already is: a retry-safe kind runs again, any other fails
// with interrupted; the control plane keeps the first terminal state it
// stored and never redelivers a settled command. Close syncs what is
// pending.
func (j *Journal) UpdateDeferred(rec Record) error {
	if rec.ID == "" {
		return errors.New("journal record without a command id")
	}
	j.ckpt.RLock()
	prev, ok := j.overlayEntry(rec.ID)
	if !ok {
		var err error
		prev.rec, ok, err = j.getFile(rec.ID)
		if err != nil {
			j.ckpt.RUnlock()
			return fmt.Errorf("journaling command %s: %w", rec.ID, err)
		}
	}
	if !ok {
		j.ckpt.RUnlock()
		return fmt.Errorf("journaling command %s: no record of command %s", rec.ID, rec.ID)
	}
	rec.Order = prev.rec.Order
	v := j.versions.Add(1)
	j.publish(map[string]entry{rec.ID: {rec: rec, fresh: prev.fresh, version: v}}, []string{rec.ID})
	j.ckpt.RUnlock()
	if err := j.commit.enqueue(&op{kind: opUpdate, rec: rec, deferred: true, version: v}); err != nil {
		return fmt.Errorf("journaling command %s: %w", rec.ID, err)
	}
	return nil
}

// publish puts staged's entries (ids in order) in the overlay, keeping a
// newer write of a command that is already there.
func (j *Journal) publish(staged map[string]entry, ids []string) {
	j.overlayLock.Lock()
	defer j.overlayLock.Unlock()
	for _, id := range ids {
		e := staged[id]
		if cur, ok := j.overlay[id]; ok && cur.version > e.version {
			continue
		}
		j.overlay[id] = e
	}
}

// overlayEntry returns id's entry in the overlay, if any.
func (j *Journal) overlayEntry(id string) (entry, bool) {
	j.overlayLock.Lock()
	defer j.overlayLock.Unlock()
	e, ok := j.overlay[id]
	return e, ok
}

func (j *Journal) overlaySize() int {
	j.overlayLock.Lock()
	defer j.overlayLock.Unlock()
	return len(j.overlay)
}

func decodeRecord(v []byte) (Record, error) {
	var r Record
	err := json.Unmarshal(v, &r)
	return r, err
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
// returns false: the file's, each in its overlay state when it has one,
// and the overlay's records that the file does not have yet, which are
// newer than all of the file's.
func (j *Journal) scan(newestFirst bool, fn func(Record) bool) error {
	j.ckpt.RLock()
	defer j.ckpt.RUnlock()
	j.overlayLock.Lock()
	over := make(map[string]Record, len(j.overlay))
	var fresh []Record
	for id, e := range j.overlay {
		over[id] = e.rec
		if e.fresh {
			fresh = append(fresh, e.rec)
		}
	}
	j.overlayLock.Unlock()
	sort.Slice(fresh, func(a, b int) bool { return fresh[a].Order < fresh[b].Order })
	if newestFirst {
		for i := len(fresh) - 1; i >= 0; i-- {
			if !fn(fresh[i]) {
				return nil
			}
		}
	}
	stopped := false
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
			r, ok := over[string(v)]
			if !ok {
				var err error
				if r, err = decodeRecord(raw); err != nil {
					return fmt.Errorf("record %s: %w", v, err)
				}
			}
			if !fn(r) {
				stopped = true
				return nil
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("reading the journal: %w", err)
	}
	if !newestFirst && !stopped {
		for _, r := range fresh {
			if !fn(r) {
				return nil
			}
		}
	}
	return nil
}

// Compact drops terminal records whose not_after (or finish) plus the replay
// horizon is before now, and returns how many it dropped. Unfinished records
// are never dropped: Recover resolves them.
func (j *Journal) Compact(now time.Time) (int, error) {
	r := j.commit.do(&op{kind: opCompact, now: now})
	if r.err != nil {
		return 0, fmt.Errorf("compacting the journal: %w", r.err)
	}
	if r.dropped > 0 {
		j.logger.Debug("compacted journal", "dropped", r.dropped)
	}
	return r.dropped, nil
}

func orderKey(n uint64) []byte {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], n)
	return b[:]
}
