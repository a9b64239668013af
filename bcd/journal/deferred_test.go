package journal

import (
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/internal/testutil"
)

// onDisk is the record of id that a restart would find now: the journal's
// files as they are (its bbolt file and its write-ahead log) copied to
// another directory and opened there.
func onDisk(t *testing.T, j *Journal, id string) Record {
	t.Helper()
	c, err := Open(hclog.NewNullLogger(), crashCopy(t, j), Options{})
	require.NoError(t, err)
	defer c.Close()
	require.Equal(t, j.ID(), c.ID())
	r, ok, err := c.Get(id)
	require.NoError(t, err)
	require.True(t, ok, "a restart finds %s", id)
	return r
}

func TestUpdateDeferred_VisibleAtOnceAndSharesTheNextSyncedCommit(t *testing.T) {
	dir := t.TempDir()
	j, err := Open(hclog.NewNullLogger(), dir, Options{DeferWait: time.Hour})
	require.NoError(t, err)
	defer j.Close()
	_, _, err = j.Insert(Record{ID: "cmd_a", Kind: "k", State: StateAccepted})
	require.NoError(t, err)

	require.NoError(t, j.UpdateDeferred(Record{ID: "cmd_a", Kind: "k", State: StateSucceeded}))
	got, ok, err := j.Get("cmd_a")
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, StateSucceeded, got.State, "readers see a deferred write at once")
	recent, err := j.Recent(1)
	require.NoError(t, err)
	require.Equal(t, StateSucceeded, recent[0].State)
	unfinished, err := j.Unfinished()
	require.NoError(t, err)
	require.Empty(t, unfinished)

	require.Equal(t, StateAccepted, onDisk(t, j, "cmd_a").State, "not written yet: a restart finds it accepted")

	// The next acceptance must be synced before its command runs; the
	// deferred outcome rides in the same commit.
	_, _, err = j.Insert(Record{ID: "cmd_b", Kind: "k", State: StateAccepted})
	require.NoError(t, err)
	require.Equal(t, StateSucceeded, onDisk(t, j, "cmd_a").State)
}

func TestUpdateDeferred_CommitsOnItsOwnAfterTheWaitAndOnClose(t *testing.T) {
	dir := t.TempDir()
	j, err := Open(hclog.NewNullLogger(), dir, Options{DeferWait: time.Millisecond})
	require.NoError(t, err)
	_, _, err = j.Insert(Record{ID: "cmd_a", Kind: "k", State: StateAccepted})
	require.NoError(t, err)
	require.NoError(t, j.UpdateDeferred(Record{ID: "cmd_a", Kind: "k", State: StateFailed, Reason: "boom"}))
	testutil.WaitFor(t, 10*time.Second, "the deferred write to be committed on its own", func() bool {
		return onDisk(t, j, "cmd_a").State == StateFailed
	})
	require.NoError(t, j.Close())

	// With a wait longer than the test, Close commits what is pending.
	j, err = Open(hclog.NewNullLogger(), dir, Options{DeferWait: time.Hour})
	require.NoError(t, err)
	_, _, err = j.Insert(Record{ID: "cmd_b", Kind: "k", State: StateAccepted})
	require.NoError(t, err)
	require.NoError(t, j.UpdateDeferred(Record{ID: "cmd_b", Kind: "k", State: StateSucceeded}))
	require.NoError(t, j.Close())
	j, err = Open(hclog.NewNullLogger(), dir, Options{})
	require.NoError(t, err)
	defer j.Close()
	got, ok, err := j.Get("cmd_b")
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, StateSucceeded, got.State)
	require.Equal(t, StateFailed, onDisk(t, j, "cmd_a").State)
}
