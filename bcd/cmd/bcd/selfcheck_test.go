package main

import (
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/bcd/journal"
)

// self-check reads the journal a running bcd holds: its newest records are
// in the write-ahead log, not yet in journal.db, and count all the same.
func TestCheckJournal_CountsWhatIsOnlyInTheWriteAheadLog(t *testing.T) {
	dir := t.TempDir()
	j, err := journal.Open(hclog.NewNullLogger(), dir, journal.Options{})
	require.NoError(t, err)
	defer j.Close()
	for _, id := range []string{"cmd_a", "cmd_b"} {
		_, _, err := j.Insert(journal.Record{ID: id, Kind: "example.echo", State: journal.StateAccepted, NotAfter: time.Now().Add(time.Hour)})
		require.NoError(t, err)
	}
	n, err := checkJournal(dir)
	require.NoError(t, err)
	require.Equal(t, 2, n)
}
