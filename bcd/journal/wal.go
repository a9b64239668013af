package journal

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/better-compute/commands/internal/fsutil"
)

// WALName is the journal's write-ahead log in the state directory, beside
// FileName. A write is durable once its frame is in the log and the log is
// synced: one fdatasync, where a bbolt commit costs two (its pages, then its
// meta page) and more pages besides. The log's records go into the bbolt
// file in one commit for hundreds of them (a checkpoint), after which the
// log starts again. A journal opened with a log replays it first.
const WALName = "journal.wal"

// A frame is a type byte, the log's generation, the payload's length, a
// CRC-32C of those and the payload, then the payload. Replay stops at the
// first frame that is torn, fails its checksum or belongs to an earlier
// generation: the tail a power cut left, or what the log held before its
// last checkpoint.
const (
	frameHeader byte = 1 // payload: the journal id the log belongs to
	frameRecord byte = 2 // payload: a Record as JSON, its whole new state
	frameSize        = 1 + 8 + 4 + 4
	// walPrealloc is the size the log is created with, written as zeros:
	// appends then change no file size, so a sync flushes data alone.
	walPrealloc = 4 << 20
	// maxFrame bounds one payload (a record with its result).
	maxFrame = 64 << 20
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func appendFrame(dst []byte, typ byte, gen uint64, payload []byte) []byte {
	var h [frameSize]byte
	h[0] = typ
	binary.LittleEndian.PutUint64(h[1:9], gen)
	binary.LittleEndian.PutUint32(h[9:13], uint32(len(payload)))
	sum := crc32.Update(crc32.Checksum(h[:13], castagnoli), castagnoli, payload)
	binary.LittleEndian.PutUint32(h[13:17], sum)
	dst = append(dst, h[:]...)
	return append(dst, payload...)
}

// nextFrame decodes the frame at data[off:], or reports ok false where the
// log ends.
func nextFrame(data []byte, off int) (typ byte, gen uint64, payload []byte, next int, ok bool) {
	if off+frameSize > len(data) {
		return 0, 0, nil, off, false
	}
	h := data[off : off+frameSize]
	n := int(binary.LittleEndian.Uint32(h[9:13]))
	if n > maxFrame || off+frameSize+n > len(data) {
		return 0, 0, nil, off, false
	}
	payload = data[off+frameSize : off+frameSize+n]
	sum := crc32.Update(crc32.Checksum(h[:13], castagnoli), castagnoli, payload)
	if sum != binary.LittleEndian.Uint32(h[13:17]) {
		return 0, 0, nil, off, false
	}
	return h[0], binary.LittleEndian.Uint64(h[1:9]), payload, off + frameSize + n, true
}

// walContents is what a log holds: the journal it belongs to, its
// generation, and its records in the order they were written.
type walContents struct {
	journalID string
	gen       uint64
	records   []Record
	// torn says the log ended in bytes that are neither zeros nor a
	// whole frame: a write cut short (reported, never an error).
	torn bool
}

// parseWAL reads a log's contents. A log without a valid header frame
// holds nothing. A record frame whose checksum holds but whose JSON does
// not decode is an error: the log was written by something else.
func parseWAL(data []byte) (walContents, error) {
	var c walContents
	typ, gen, payload, off, ok := nextFrame(data, 0)
	if !ok || typ != frameHeader {
		c.torn = !allZero(data)
		return c, nil
	}
	c.journalID, c.gen = string(payload), gen
	for {
		typ, g, payload, next, ok := nextFrame(data, off)
		if !ok || typ != frameRecord || g != gen {
			// The end: zeros, a torn tail, or an earlier generation's frames.
			c.torn = !ok && !allZero(data[off:min(len(data), off+frameSize)])
			return c, nil
		}
		var r Record
		if err := json.Unmarshal(payload, &r); err != nil {
			return c, fmt.Errorf("write-ahead log record at byte %d: %w", off, err)
		}
		if r.ID == "" {
			return c, fmt.Errorf("write-ahead log record at byte %d has no command id", off)
		}
		c.records = append(c.records, r)
		off = next
	}
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// wal is the open log: only the committer goroutine writes it.
type wal struct {
	f   *os.File
	id  string
	gen uint64
	off int64
	buf []byte
	// headerEnd is where a generation's records start.
	headerEnd int64
	// needHeader: gen's header frame is not known to be synced yet (its
	// write or sync failed). No frame of gen is written before it is:
	// a frame of a generation whose header is not on disk would read, on
	// replay, as the end of the log before it.
	needHeader bool
}

// openWAL opens (creating and preallocating when needed) the log at path
// for journal id, starting generation gen: a header frame at the start,
// synced, after which frames of earlier generations read as the end.
func openWAL(path, id string, gen uint64) (*wal, error) {
	_, statErr := os.Stat(path)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("opening the write-ahead log %s: %w", path, err)
	}
	w := &wal{f: f, id: id, gen: gen}
	fail := func(err error) (*wal, error) {
		_ = f.Close()
		return nil, fmt.Errorf("preparing the write-ahead log %s: %w", path, err)
	}
	st, err := f.Stat()
	if err != nil {
		return fail(err)
	}
	if st.Size() < walPrealloc {
		if _, err := f.WriteAt(make([]byte, walPrealloc-st.Size()), st.Size()); err != nil {
			return fail(err)
		}
		if err := f.Sync(); err != nil {
			return fail(err)
		}
	}
	if errors.Is(statErr, os.ErrNotExist) {
		if err := fsutil.SyncDir(filepath.Dir(path)); err != nil {
			return fail(err)
		}
	}
	if err := w.restart(gen); err != nil {
		return fail(err)
	}
	return w, nil
}

// restart begins generation gen: its header frame at the start, synced.
// What the log held before reads as ended from then on. The generation is
// gen from here on even when this fails: the next flush writes and syncs
// the header first (needHeader), and writes no frame until it is synced.
func (w *wal) restart(gen uint64) error {
	hdr := appendFrame(nil, frameHeader, gen, []byte(w.id))
	w.gen, w.off, w.headerEnd, w.needHeader = gen, int64(len(hdr)), int64(len(hdr)), true
	return w.writeHeader()
}

// writeHeader writes the generation's header frame at the start and syncs
// it.
func (w *wal) writeHeader() error {
	hdr := appendFrame(nil, frameHeader, w.gen, []byte(w.id))
	if _, err := w.f.WriteAt(hdr, 0); err != nil {
		return fmt.Errorf("writing the write-ahead log's header: %w", err)
	}
	if err := fdatasync(w.f); err != nil {
		return fmt.Errorf("syncing the write-ahead log's header: %w", err)
	}
	w.needHeader = false
	return nil
}

// add queues r's frame for the next flush.
func (w *wal) add(r Record) error {
	v, err := json.Marshal(r)
	if err != nil {
		return err
	}
	if len(v) > maxFrame {
		return fmt.Errorf("record of command %s is %d bytes, over the journal's %d", r.ID, len(v), maxFrame)
	}
	w.buf = appendFrame(w.buf, frameRecord, w.gen, v)
	return nil
}

// flush writes the queued frames and syncs them: one write, one
// fdatasync. On an error nothing queued counts as written (the next flush
// writes at the same place).
func (w *wal) flush() error {
	if len(w.buf) == 0 {
		return nil
	}
	defer func() { w.buf = w.buf[:0] }()
	if w.needHeader {
		if err := w.writeHeader(); err != nil {
			return err
		}
	}
	if _, err := w.f.WriteAt(w.buf, w.off); err != nil {
		return fmt.Errorf("writing the write-ahead log: %w", err)
	}
	if err := fdatasync(w.f); err != nil {
		return fmt.Errorf("syncing the write-ahead log: %w", err)
	}
	w.off += int64(len(w.buf))
	return nil
}

func (w *wal) close() error { return w.f.Close() }

// openLog replays the write-ahead log in dir into the bbolt file, when it
// belongs to this journal, and opens it for the next generation. A log of
// another journal (the file was missing or corrupt, so this journal is new)
// or one that does not decode is moved aside, named in the log line, and a
// new one is started: never replayed into a journal it does not belong to,
// never a crash loop.
func (j *Journal) openLog(dir string) (*wal, error) {
	path := filepath.Join(dir, WALName)
	data, err := os.ReadFile(path)
	gen := uint64(1)
	switch {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		return nil, fmt.Errorf("reading the write-ahead log %s: %w", path, err)
	default:
		c, perr := parseWAL(data)
		switch {
		case perr != nil || (c.journalID != "" && c.journalID != j.id):
			why := "it belongs to journal " + c.journalID + ", not " + j.id
			if perr != nil {
				why = perr.Error()
			}
			aside := fmt.Sprintf("%s.aside-%s", path, time.Now().UTC().Format("20060102T150405.000000000Z"))
			if rerr := os.Rename(path, aside); rerr != nil {
				return nil, fmt.Errorf("the write-ahead log %s cannot be replayed (%s) and cannot be moved aside: %w", path, why, rerr)
			}
			j.logger.Error("write-ahead log not replayed: moved aside", "reason", why, "moved_to", aside, "records", len(c.records))
		case c.journalID == "":
			// No header: a log never written, or one whose header write
			// was cut short (before any frame of its generation, which
			// waits for the header's sync). Nothing to replay; but what
			// lies past the header, an earlier life's frames, could read
			// as the new generation's if the generation repeated, so the
			// log is cleared first.
			if c.torn {
				j.logger.Warn("write-ahead log has no header; nothing to replay; clearing it", "path", path)
			}
			if !allZero(data) {
				if err := clearLog(path, len(data)); err != nil {
					return nil, err
				}
			}
		default:
			gen = c.gen + 1
			if len(c.records) > 0 {
				if err := j.replay(c.records); err != nil {
					return nil, fmt.Errorf("replaying the write-ahead log %s: %w", path, err)
				}
			}
			j.logger.Info("replayed the write-ahead log", "records", len(c.records), "torn_tail", c.torn)
		}
	}
	return openWAL(path, j.id, gen)
}

// clearLog overwrites the log at path (size bytes) with zeros, synced.
func clearLog(path string, size int) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("clearing the write-ahead log %s: %w", path, err)
	}
	defer f.Close()
	if _, err := f.WriteAt(make([]byte, size), 0); err != nil {
		return fmt.Errorf("clearing the write-ahead log %s: %w", path, err)
	}
	if err := fdatasync(f); err != nil {
		return fmt.Errorf("clearing the write-ahead log %s: %w", path, err)
	}
	return nil
}

// replay stores a log's records in the file in one synced commit
// (putRecords, in the order they were written).
func (j *Journal) replay(recs []Record) error {
	return j.db.Update(func(tx *bolt.Tx) error { return putRecords(tx, recs, 0) })
}
