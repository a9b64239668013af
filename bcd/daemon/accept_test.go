package daemon

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/bcd/accept"
	"github.com/better-compute/commands/bcd/journal"
	"github.com/better-compute/commands/bcd/lanes"
	"github.com/better-compute/commands/internal/testutil"
	"github.com/better-compute/commands/sdk/kind"
)

func TestSubmit_BusyWhenTheLaneIsFullAndNotJournaled(t *testing.T) {
	// Spec: "BUSY: no credits" and "The refusals other than BUSY make the
	// command rejected, and the daemon journals them".
	n := start(t, "", func(c *Config) { c.Lanes = lanes.Sizes{Bulk: 1} })
	h := newHold(t, true)
	ch1, err := n.d.Submit(context.Background(), cmd("cmd_bulk_1", "bcdcore.bulk", h))
	require.NoError(t, err)
	h.waitStarted(t)

	h2 := newHold(t, false)
	ch2, err := n.d.Submit(context.Background(), cmd("cmd_bulk_2", "bcdcore.bulk", h2))
	require.NoError(t, err)
	busy := collect(t, ch2)
	require.Len(t, busy, 1)
	require.Equal(t, journal.StateRejected, busy[0].State)
	require.Equal(t, accept.Busy, busy[0].RejectCode)
	_, found, err := n.j.Get("cmd_bulk_2")
	require.NoError(t, err)
	require.False(t, found, "BUSY is not journaled")

	// Another lane is not affected.
	ch3, err := n.d.Submit(context.Background(), cmd("cmd_control", "example.noop", map[string]any{}))
	require.NoError(t, err)
	require.Equal(t, journal.StateSucceeded, last(t, collect(t, ch3)).State)

	// Once the lane has room, the same command (the gateway's retry) runs.
	h.release(t)
	require.Equal(t, journal.StateSucceeded, last(t, collect(t, ch1)).State)
	testutil.WaitFor(t, 10*time.Second, "the bulk worker to return", func() bool { return n.d.Lanes().Free(kind.LaneBulk) })
	ch2, err = n.d.Submit(context.Background(), cmd("cmd_bulk_2", "bcdcore.bulk", h2))
	require.NoError(t, err)
	out := last(t, collect(t, ch2))
	require.Equal(t, journal.StateSucceeded, out.State)
	require.False(t, out.Duplicate)
	require.Equal(t, 1, h2.runs(t))
}

func TestSubmit_RefusalsJournaledAndAnsweredTheSame(t *testing.T) {
	n := start(t, "", nil)
	expired := cmd("cmd_expired", "example.noop", map[string]any{})
	expired.NotAfter = time.Now().Add(-time.Second)
	cases := []struct {
		cmd  accept.Command
		code accept.Code
	}{
		{cmd("cmd_unknown", "nope.nope", nil), accept.Unsupported},
		{func() accept.Command {
			c := cmd("cmd_other_node", "example.noop", map[string]any{})
			c.NodeID = "node_other"
			return c
		}(), accept.Unsupported},
		{expired, accept.Expired},
		{func() accept.Command {
			c := cmd("cmd_stale", "example.noop", map[string]any{})
			c.MinGeneration, c.NotAfter = 9, time.Now().Add(-time.Second)
			return c
		}(), accept.StaleGeneration},
	}
	for _, c := range cases {
		ch, err := n.d.Submit(context.Background(), c.cmd)
		require.NoError(t, err)
		first := collect(t, ch)
		require.Len(t, first, 1, c.cmd.ID)
		require.Equal(t, journal.StateRejected, first[0].State)
		require.Equal(t, c.code, first[0].RejectCode, c.cmd.ID)
		rec, found, err := n.j.Get(c.cmd.ID)
		require.NoError(t, err)
		require.True(t, found, "%s: a refusal is journaled", c.cmd.ID)
		require.Equal(t, string(c.code), rec.RejectCode)

		// The duplicate, even one that would now pass, gets the same answer.
		dup := c.cmd
		dup.NotAfter = time.Now().Add(time.Hour)
		ch, err = n.d.Submit(context.Background(), dup)
		require.NoError(t, err)
		again := collect(t, ch)
		require.Len(t, again, 1)
		require.True(t, again[0].Duplicate)
		require.Equal(t, c.code, again[0].RejectCode)
		require.Equal(t, first[0].Reason, again[0].Reason)
	}
}

func TestSubmit_StaleGenerationWaitsForTheSpec(t *testing.T) {
	// Spec: "STALE_GENERATION: min_generation is ahead of the spec it
	// applied; it asks for the spec, waits until not_after, then rejects".
	asked := make(chan int64, 4)
	n := start(t, "", func(c *Config) { c.OnSpecRequest = func(have int64) { asked <- have } })
	h := newHold(t, false)
	c := cmd("cmd_needs_gen_2", "bcdcore.hold", h)
	c.MinGeneration = 2
	ch, err := n.d.Submit(context.Background(), c)
	require.NoError(t, err)
	require.Equal(t, int64(0), <-asked, "it asks for the spec")
	_, err = n.state.ApplySpec(1, []byte(`{}`))
	require.NoError(t, err)
	_, err = n.state.ApplySpec(2, []byte(`{"holds":[]}`))
	require.NoError(t, err)
	out := last(t, collect(t, ch))
	require.Equal(t, journal.StateSucceeded, out.State, "ran once the spec arrived")
	require.Equal(t, 1, h.runs(t))

	// Never arrives: rejected at not_after, and journaled.
	c = cmd("cmd_needs_gen_9", "example.noop", map[string]any{})
	c.MinGeneration = 9
	c.NotAfter = time.Now().Add(300 * time.Millisecond)
	ch, err = n.d.Submit(context.Background(), c)
	require.NoError(t, err)
	us := collect(t, ch)
	require.Len(t, us, 1)
	require.Equal(t, accept.StaleGeneration, us[0].RejectCode)
	_, found, err := n.j.Get("cmd_needs_gen_9")
	require.NoError(t, err)
	require.True(t, found)
}

func TestSubmit_ExpiredJudgedInServerTime(t *testing.T) {
	n := start(t, "", nil)
	// The server's clock is an hour ahead of the node's.
	n.d.SetServerTime(time.Now().Add(time.Hour))
	ch, err := n.d.Submit(context.Background(), cmd("cmd_server_time", "example.noop", map[string]any{}))
	require.NoError(t, err)
	us := collect(t, ch)
	require.Equal(t, accept.Expired, last(t, us).RejectCode)
}

func TestSubmit_NextCommandAfterAnOutcomeIsNeverBusy(t *testing.T) {
	// The gateway returns a lane credit when the outcome arrives and may send
	// the next command at once: the worker must be free by then.
	n := start(t, "", func(c *Config) { c.Lanes = lanes.Sizes{Bulk: 1} })
	h := newHold(t, true)
	h.release(t)
	for i := 0; i < 20; i++ {
		ch, err := n.d.Submit(context.Background(), cmd("cmd_next_"+string(rune('a'+i)), "bcdcore.bulk", h))
		require.NoError(t, err)
		out := last(t, collect(t, ch))
		require.Equal(t, journal.StateSucceeded, out.State, "command %d: %+v", i, out)
	}
}
