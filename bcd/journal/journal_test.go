package journal

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/sdk/kind"
)

func open(t *testing.T, dir string) *Journal {
	t.Helper()
	j, err := Open(hclog.NewNullLogger(), dir, Options{ReplayHorizon: time.Hour})
	require.NoError(t, err)
	return j
}

func rec(id string, notAfter time.Time) Record {
	return Record{ID: id, Kind: "example.echo", State: StateAccepted, NotAfter: notAfter,
		AcceptedAt: time.Now(), Flags: kind.Flags{RetrySafe: true}, Payload: json.RawMessage(`{"a":1}`)}
}

func TestJournal_IDCreatedWithTheFileAndKept(t *testing.T) {
	dir := t.TempDir()
	j := open(t, dir)
	require.True(t, j.Created())
	id := j.ID()
	require.Regexp(t, `^jrn_[0-9a-f]{32}$`, id)
	require.NoError(t, j.Close())

	j = open(t, dir)
	defer j.Close()
	require.False(t, j.Created())
	require.Equal(t, id, j.ID(), "reopening keeps the journal id")
}

func TestJournal_MissingFileMeansANewID(t *testing.T) {
	// Spec: "A daemon whose journal is gone (a ramdisk reboot, a reinstall,
	// corruption) comes back with a new journal id."
	dir := t.TempDir()
	j := open(t, dir)
	id := j.ID()
	require.NoError(t, j.Close())
	require.NoError(t, os.Remove(filepath.Join(dir, FileName)))
	j = open(t, dir)
	defer j.Close()
	require.True(t, j.Created())
	require.NotEqual(t, id, j.ID())
}

func TestJournal_CorruptFileMovedAsideAndNewID(t *testing.T) {
	cases := map[string]func(t *testing.T, path string){
		"garbage": func(t *testing.T, path string) {
			require.NoError(t, os.WriteFile(path, []byte("this is not a bbolt file at all"), 0o600))
		},
		"truncated": func(t *testing.T, path string) {
			require.NoError(t, os.Truncate(path, 100))
		},
		"truncated after the meta pages": func(t *testing.T, path string) {
			// bbolt would fault (SIGBUS) mapping this: the meta pages are
			// valid but name pages past the end of the file.
			require.NoError(t, os.Truncate(path, 8192))
		},
		"zeroed meta pages": func(t *testing.T, path string) {
			f, err := os.OpenFile(path, os.O_RDWR, 0)
			require.NoError(t, err)
			_, err = f.WriteAt(make([]byte, 8192), 0)
			require.NoError(t, err)
			require.NoError(t, f.Close())
		},
		"empty": func(t *testing.T, path string) {
			require.NoError(t, os.Truncate(path, 0))
		},
	}
	for name, damage := range cases {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			j := open(t, dir)
			old := j.ID()
			_, _, err := j.Insert(rec("cmd_1", time.Now().Add(time.Hour)))
			require.NoError(t, err)
			require.NoError(t, j.Close())
			damage(t, filepath.Join(dir, FileName))

			j = open(t, dir)
			defer j.Close()
			require.True(t, j.Created())
			require.NotEqual(t, old, j.ID())
			require.NotEmpty(t, j.CorruptPath())
			require.FileExists(t, j.CorruptPath(), "the corrupt file is kept for a post-mortem")
			_, found, err := j.Get("cmd_1")
			require.NoError(t, err)
			require.False(t, found)
			// The new journal works.
			_, inserted, err := j.Insert(rec("cmd_2", time.Now().Add(time.Hour)))
			require.NoError(t, err)
			require.True(t, inserted)
		})
	}
}

func TestJournal_LockedIsAnErrorNotCorruption(t *testing.T) {
	dir := t.TempDir()
	j := open(t, dir)
	defer j.Close()
	_, err := Open(hclog.NewNullLogger(), dir, Options{LockTimeout: 50 * time.Millisecond})
	require.ErrorIs(t, err, ErrLocked)
	matches, _ := filepath.Glob(filepath.Join(dir, FileName+".corrupt-*"))
	require.Empty(t, matches, "a held journal is never moved aside")
}

func TestJournal_InsertOnceThenStoredAnswer(t *testing.T) {
	dir := t.TempDir()
	j := open(t, dir)
	r := rec("cmd_1", time.Now().Add(time.Hour))
	stored, inserted, err := j.Insert(r)
	require.NoError(t, err)
	require.True(t, inserted)
	require.Equal(t, uint64(1), stored.Order)

	r.State = StateSucceeded
	r.SetResult(json.RawMessage(`{"ok":true}`))
	r.FinishedAt = time.Now()
	require.NoError(t, j.Update(r))

	again := rec("cmd_1", time.Now().Add(time.Hour))
	stored, inserted, err = j.Insert(again)
	require.NoError(t, err)
	require.False(t, inserted, "a duplicate is not journaled twice")
	require.Equal(t, StateSucceeded, stored.State)
	require.JSONEq(t, `{"ok":true}`, string(stored.Result))
	require.Len(t, stored.ResultSHA256, 64)
	require.NoError(t, j.Close())

	// Durable across a reopen.
	j = open(t, dir)
	defer j.Close()
	got, found, err := j.Get("cmd_1")
	require.NoError(t, err)
	require.True(t, found)
	require.Equal(t, StateSucceeded, got.State)
	require.Equal(t, stored.ResultSHA256, got.ResultSHA256)
}

func TestJournal_UpdateUnknownFails(t *testing.T) {
	j := open(t, t.TempDir())
	defer j.Close()
	require.Error(t, j.Update(rec("cmd_nope", time.Now())))
}

func TestJournal_UnfinishedAndRecent(t *testing.T) {
	j := open(t, t.TempDir())
	defer j.Close()
	for i := 1; i <= 5; i++ {
		r := rec(fmt.Sprintf("cmd_%d", i), time.Now().Add(time.Hour))
		_, _, err := j.Insert(r)
		require.NoError(t, err)
		if i%2 == 0 {
			r.State = StateFailed
			require.NoError(t, j.Update(r))
		}
	}
	un, err := j.Unfinished()
	require.NoError(t, err)
	ids := []string{}
	for _, r := range un {
		ids = append(ids, r.ID)
	}
	require.Equal(t, []string{"cmd_1", "cmd_3", "cmd_5"}, ids, "oldest first")

	recent, err := j.Recent(3)
	require.NoError(t, err)
	ids = ids[:0]
	for _, r := range recent {
		ids = append(ids, r.ID)
	}
	require.Equal(t, []string{"cmd_5", "cmd_4", "cmd_3"}, ids, "newest first")
	none, err := j.Recent(0)
	require.NoError(t, err)
	require.Empty(t, none)
}

func TestJournal_CompactKeepsUntilNotAfterPlusHorizon(t *testing.T) {
	// Records are kept at least until not_after plus the replay horizon.
	j := open(t, t.TempDir()) // horizon: 1h
	defer j.Close()
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	done := rec("cmd_done", base)
	done.FinishedAt = base.Add(-time.Minute)
	_, _, err := j.Insert(done)
	require.NoError(t, err)
	done.State = StateSucceeded
	require.NoError(t, j.Update(done))

	late := rec("cmd_finished_late", base)
	late.FinishedAt = base.Add(30 * time.Minute)
	late.State = StateFailed
	_, _, err = j.Insert(late)
	require.NoError(t, err)

	open := rec("cmd_unfinished", base.Add(-48*time.Hour))
	_, _, err = j.Insert(open)
	require.NoError(t, err)

	n, err := j.Compact(base.Add(59 * time.Minute))
	require.NoError(t, err)
	require.Zero(t, n, "nothing is dropped before not_after plus the horizon")

	n, err = j.Compact(base.Add(61 * time.Minute))
	require.NoError(t, err)
	require.Equal(t, 1, n)
	_, found, _ := j.Get("cmd_done")
	require.False(t, found)
	_, found, _ = j.Get("cmd_finished_late")
	require.True(t, found, "kept until its finish plus the horizon")

	n, err = j.Compact(base.Add(100 * 24 * time.Hour))
	require.NoError(t, err)
	require.Equal(t, 1, n)
	_, found, _ = j.Get("cmd_unfinished")
	require.True(t, found, "unfinished records are left for Recover")
	recent, err := j.Recent(10)
	require.NoError(t, err)
	require.Len(t, recent, 1)
}

func TestJournal_ConcurrentWritersShareCommits(t *testing.T) {
	j := open(t, t.TempDir())
	defer j.Close()
	var wg sync.WaitGroup
	for i := 0; i < 64; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			r := rec(fmt.Sprintf("cmd_%02d", i), time.Now().Add(time.Hour))
			_, inserted, err := j.Insert(r)
			require.NoError(t, err)
			require.True(t, inserted)
			r.State = StateSucceeded
			require.NoError(t, j.Update(r))
		}(i)
	}
	wg.Wait()
	recent, err := j.Recent(100)
	require.NoError(t, err)
	require.Len(t, recent, 64)
	seen := map[uint64]bool{}
	for _, r := range recent {
		require.Equal(t, StateSucceeded, r.State)
		require.False(t, seen[r.Order])
		seen[r.Order] = true
	}
}

func TestJournal_ClosedRefusesWrites(t *testing.T) {
	j := open(t, t.TempDir())
	require.NoError(t, j.Close())
	_, _, err := j.Insert(rec("cmd_1", time.Now()))
	require.Error(t, err)
}
