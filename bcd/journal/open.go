package journal

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"time"

	"github.com/hashicorp/go-hclog"
	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
)

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
