package journal

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/require"
)

// crashCopy is the state directory as a kill -9 would leave it now: the
// journal's two files copied as they are, with the journal still open.
func crashCopy(t *testing.T, j *Journal) string {
	t.Helper()
	dir := t.TempDir()
	found, err := CopyFiles(filepath.Dir(j.Path()), dir)
	require.NoError(t, err)
	require.True(t, found)
	return dir
}

func ids(recs []Record) []string {
	out := make([]string, len(recs))
	for i, r := range recs {
		out[i] = r.ID
	}
	return out
}

// "A command's acceptance is committed and synced to disk before the call
// returns": synced writes are in the write-ahead log, not yet in the bbolt
// file, and a journal opened after a crash replays them, each command in
// its newest state, in insertion order, and goes on numbering after them.
func TestJournal_ACrashedJournalReplaysItsWriteAheadLog(t *testing.T) {
	j := open(t, t.TempDir())
	defer j.Close()
	future := time.Now().Add(time.Hour)
	for i := range 5 {
		_, inserted, err := j.Insert(rec(fmt.Sprintf("cmd_%d", i), future))
		require.NoError(t, err)
		require.True(t, inserted)
	}
	done := rec("cmd_1", future)
	done.State = StateSucceeded
	require.NoError(t, j.Update(done))
	_, inFile, err := j.getFile("cmd_0")
	require.NoError(t, err)
	require.False(t, inFile, "a synced write goes to the log; the file gets it at a checkpoint")

	c, err := Open(hclog.NewNullLogger(), crashCopy(t, j), Options{})
	require.NoError(t, err)
	defer c.Close()
	require.Equal(t, j.ID(), c.ID())
	recent, err := c.Recent(10)
	require.NoError(t, err)
	require.Equal(t, []string{"cmd_4", "cmd_3", "cmd_2", "cmd_1", "cmd_0"}, ids(recent))
	require.Equal(t, StateSucceeded, recent[3].State, "its newest state")
	unfinished, err := c.Unfinished()
	require.NoError(t, err)
	require.Equal(t, []string{"cmd_0", "cmd_2", "cmd_3", "cmd_4"}, ids(unfinished))
	_, inFile, err = c.getFile("cmd_4")
	require.NoError(t, err)
	require.True(t, inFile, "replayed into the file")
	after, _, err := c.Insert(rec("cmd_5", future))
	require.NoError(t, err)
	require.Greater(t, after.Order, recent[0].Order, "numbering goes on after the replayed records")
	stored, inserted, err := c.Insert(rec("cmd_2", future))
	require.NoError(t, err)
	require.False(t, inserted, "a replayed record answers a duplicate delivery")
	require.Equal(t, "cmd_2", stored.ID)
}

// A power cut in the middle of a write leaves a torn frame at the log's
// end: the replay keeps every whole frame before it, and the journal opens.
func TestJournal_ATornLogTailIsDropped(t *testing.T) {
	j := open(t, t.TempDir())
	defer j.Close()
	future := time.Now().Add(time.Hour)
	for i := range 3 {
		_, _, err := j.Insert(rec(fmt.Sprintf("cmd_%d", i), future))
		require.NoError(t, err)
	}
	end := j.commit.wal.off
	dir := crashCopy(t, j)
	b, err := os.ReadFile(filepath.Join(dir, WALName))
	require.NoError(t, err)
	// The last frame cut short, then bytes that are no frame.
	last := end - 40
	copy(b[last:end], make([]byte, 40))
	copy(b[last+10:], []byte("torn-torn-torn"))
	require.NoError(t, os.WriteFile(filepath.Join(dir, WALName), b, 0o600))

	c, err := Open(hclog.NewNullLogger(), dir, Options{})
	require.NoError(t, err)
	defer c.Close()
	recent, err := c.Recent(10)
	require.NoError(t, err)
	require.Equal(t, []string{"cmd_1", "cmd_0"}, ids(recent), "the torn last write is not replayed")
	_, _, err = c.Insert(rec("cmd_9", future))
	require.NoError(t, err)
}

// A log that belongs to another journal (its file was lost, so this is a
// new journal with a new id) is never replayed into this one: it is moved
// aside and the new journal starts with a log of its own.
func TestJournal_ALogOfAnotherJournalIsMovedAside(t *testing.T) {
	j := open(t, t.TempDir())
	future := time.Now().Add(time.Hour)
	_, _, err := j.Insert(rec("cmd_old", future))
	require.NoError(t, err)
	dir := crashCopy(t, j)
	require.NoError(t, j.Close())
	require.NoError(t, os.Remove(filepath.Join(dir, FileName)))

	c, err := Open(hclog.NewNullLogger(), dir, Options{})
	require.NoError(t, err)
	defer c.Close()
	require.True(t, c.Created())
	require.NotEqual(t, j.ID(), c.ID())
	_, ok, err := c.Get("cmd_old")
	require.NoError(t, err)
	require.False(t, ok, "another journal's record is not this journal's")
	aside, _ := filepath.Glob(filepath.Join(dir, WALName+".aside-*"))
	require.Len(t, aside, 1)
}

// Past checkpointRecords commands in the log, their records move into the
// bbolt file in one commit and the log starts again; what a crash then
// leaves (the file, and a log of the next generation over the old one's
// bytes) reads back whole, and Compact drops what it should.
func TestJournal_CheckpointMovesTheLogIntoTheFile(t *testing.T) {
	j := open(t, t.TempDir())
	defer j.Close()
	past := time.Now().Add(-2 * time.Hour)
	n := checkpointRecords + 10
	for i := range n {
		r := rec(fmt.Sprintf("cmd_%04d", i), past)
		_, _, err := j.Insert(r)
		require.NoError(t, err)
		r.State, r.FinishedAt = StateSucceeded, past
		require.NoError(t, j.Update(r))
	}
	require.Less(t, j.overlaySize(), checkpointRecords, "a checkpoint emptied the overlay")
	_, inFile, err := j.getFile("cmd_0000")
	require.NoError(t, err)
	require.True(t, inFile)

	c, err := Open(hclog.NewNullLogger(), crashCopy(t, j), Options{ReplayHorizon: time.Hour})
	require.NoError(t, err)
	defer c.Close()
	recent, err := c.Recent(n + 1)
	require.NoError(t, err)
	require.Len(t, recent, n)
	for i, r := range recent {
		require.Equal(t, fmt.Sprintf("cmd_%04d", n-1-i), r.ID)
		require.Equal(t, StateSucceeded, r.State)
	}
	dropped, err := c.Compact(time.Now())
	require.NoError(t, err)
	require.Equal(t, n, dropped, "every record is past not_after plus the horizon")
	recent, err = c.Recent(10)
	require.NoError(t, err)
	require.Empty(t, recent)
}

// FuzzParseWAL feeds arbitrary bytes as a write-ahead log: parsing never
// panics, and whatever it returns it read from whole, checksummed frames.
func FuzzParseWAL(f *testing.F) {
	f.Add([]byte{})
	f.Add(make([]byte, 64))
	hdr := appendFrame(nil, frameHeader, 3, []byte("jrn_0123"))
	f.Add(hdr)
	valid := appendFrame(append([]byte(nil), hdr...), frameRecord, 3, []byte(`{"id":"cmd_a","kind":"k","state":"accepted","order":1}`))
	f.Add(valid)
	f.Add(valid[:len(valid)-3])
	f.Add(appendFrame(append([]byte(nil), hdr...), frameRecord, 2, []byte(`{"id":"cmd_old","state":"accepted"}`)))
	f.Add(appendFrame(append([]byte(nil), hdr...), frameRecord, 3, []byte(`not json`)))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := parseWAL(data)
		if err != nil {
			return
		}
		for _, r := range c.records {
			if r.ID == "" {
				t.Fatalf("a record without an id: %+v", r)
			}
		}
		if len(c.records) > 0 && c.journalID == "" {
			t.Fatal("records without a header")
		}
	})
}

// A generation's frames end the log where the next generation's begin:
// after a checkpoint, fewer frames of generation 2 over generation 1's
// (same size, other states) replay alone; generation 1's past them do not.
func TestParseWAL_AnEarlierGenerationsFramesAreNotReplayed(t *testing.T) {
	frame := func(gen uint64, id, state string) []byte {
		v := fmt.Sprintf(`{"id":%q,"state":%q,"order":1}`, id, state)
		return appendFrame(nil, frameRecord, gen, []byte(v))
	}
	old := appendFrame(nil, frameHeader, 1, []byte("jrn_x"))
	for _, id := range []string{"cmd_a", "cmd_b", "cmd_c"} {
		old = append(old, frame(1, id, "accepted")...)
	}
	log := append([]byte(nil), old...)
	next := appendFrame(nil, frameHeader, 2, []byte("jrn_x"))
	next = append(next, frame(2, "cmd_a", "finished")...)
	require.Len(t, next, len(old[:len(next)]), "the generations' frames are the same size")
	copy(log, next)

	c, err := parseWAL(log)
	require.NoError(t, err)
	require.Equal(t, uint64(2), c.gen)
	require.Equal(t, []string{"cmd_a"}, ids(c.records))
	require.Equal(t, "finished", string(c.records[0].State))
}

// A new generation's header is synced before any of its frames is written:
// when the header cannot be written, frames wait (the flush fails) and the
// log still reads as the old generation, whole; once it can, the header
// goes first.
func TestWAL_NoFrameIsWrittenBeforeItsGenerationsHeader(t *testing.T) {
	path := filepath.Join(t.TempDir(), WALName)
	w, err := openWAL(path, "jrn_x", 1)
	require.NoError(t, err)
	defer func() { _ = w.close() }()
	require.NoError(t, w.add(Record{ID: "cmd_a", State: "accepted", Order: 1}))
	require.NoError(t, w.flush())

	rw := w.f
	ro, err := os.Open(path)
	require.NoError(t, err)
	w.f = ro // writes fail
	require.Error(t, w.restart(2))
	require.NoError(t, w.add(Record{ID: "cmd_b", State: "accepted", Order: 2}))
	require.Error(t, w.flush())
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	c, err := parseWAL(data)
	require.NoError(t, err)
	require.Equal(t, uint64(1), c.gen, "the old generation's header is still the log's")
	require.Equal(t, []string{"cmd_a"}, ids(c.records))

	w.f = rw
	_ = ro.Close()
	require.NoError(t, w.add(Record{ID: "cmd_b", State: "accepted", Order: 2}))
	require.NoError(t, w.flush())
	data, err = os.ReadFile(path)
	require.NoError(t, err)
	c, err = parseWAL(data)
	require.NoError(t, err)
	require.Equal(t, uint64(2), c.gen)
	require.Equal(t, []string{"cmd_b"}, ids(c.records))
}

// A log whose header is torn holds nothing to replay (no frame of a
// generation is written before its header is synced), but its old frames
// must not read as the new generation's: it is cleared before the journal
// writes to it again, so a crash after one more write replays that write
// alone.
func TestJournal_ALogWithATornHeaderIsClearedBeforeReuse(t *testing.T) {
	j := open(t, t.TempDir())
	future := time.Now().Add(time.Hour)
	for i := range 3 {
		_, _, err := j.Insert(rec(fmt.Sprintf("cmd_%d", i), future))
		require.NoError(t, err)
	}
	dir := crashCopy(t, j)
	require.NoError(t, j.Close())
	b, err := os.ReadFile(filepath.Join(dir, WALName))
	require.NoError(t, err)
	copy(b[:5], []byte{0xff, 0xff, 0xff, 0xff, 0xff}) // the header torn
	require.NoError(t, os.WriteFile(filepath.Join(dir, WALName), b, 0o600))

	c, err := Open(hclog.NewNullLogger(), dir, Options{})
	require.NoError(t, err)
	_, _, err = c.Insert(rec("cmd_9", future))
	require.NoError(t, err)
	again, tail := crashCopy(t, c), c.commit.wal.off
	require.NoError(t, c.Close())
	data, err := os.ReadFile(filepath.Join(again, WALName))
	require.NoError(t, err)
	got, err := parseWAL(data)
	require.NoError(t, err)
	require.Equal(t, []string{"cmd_9"}, ids(got.records), "only what was written after the torn header")
	require.True(t, allZero(data[tail:]), "nothing of the old log is left past the new tail")
}
