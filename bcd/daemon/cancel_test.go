package daemon

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/bcd/journal"
)

func TestCancel_StopsALongRunningKindAndReportsTheRealOutcome(t *testing.T) {
	// Spec: "The daemon stops between actions and reports the real outcome,
	// so a side effect that already happened is never hidden."
	n := start(t, "", nil)
	h := newHold(t, true) // never released
	ch, err := n.d.Submit(context.Background(), cmd("cmd_cancel", "bcdcore.hold", h))
	require.NoError(t, err)
	h.waitStarted(t)
	require.NoError(t, n.d.Cancel("cmd_cancel"))
	out := last(t, collect(t, ch))
	require.Equal(t, journal.StateCancelled, out.State)
	require.JSONEq(t, `{"runs":1,"released":false}`, string(out.Result), "the plugin's own report")

	rec, _, err := n.j.Get("cmd_cancel")
	require.NoError(t, err)
	require.Equal(t, journal.StateCancelled, rec.State)
	require.True(t, rec.CancelRequested)

	// A finished command is left as it is; an unknown one is not found.
	require.NoError(t, n.d.Cancel("cmd_cancel"))
	require.ErrorIs(t, n.d.Cancel("cmd_never"), ErrNotFound)
}

func TestCancel_WhileWaitingForTheSpecNothingRuns(t *testing.T) {
	n := start(t, "", nil)
	h := newHold(t, false)
	c := cmd("cmd_wait_cancel", "bcdcore.hold", h)
	c.MinGeneration = 3
	ch, err := n.d.Submit(context.Background(), c)
	require.NoError(t, err)
	require.NoError(t, n.d.Cancel("cmd_wait_cancel"))
	out := last(t, collect(t, ch))
	require.Equal(t, journal.StateCancelled, out.State)
	require.Zero(t, h.runs(t))
	rec, found, err := n.j.Get("cmd_wait_cancel")
	require.NoError(t, err)
	require.True(t, found, "journaled, so a duplicate gets the same answer")
	require.Equal(t, journal.StateCancelled, rec.State)
}
