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
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	bolt "go.etcd.io/bbolt"
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

// DefaultDeferWait is how long a deferred write waits for a synced write to
// share its commit (see UpdateDeferred).
const DefaultDeferWait = 2 * time.Millisecond

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

func orderKey(n uint64) []byte {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], n)
	return b[:]
}
