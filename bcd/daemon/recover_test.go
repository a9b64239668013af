package daemon

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/bcd/journal"
	"github.com/better-compute/commands/sdk/kind"
)

// crashLeftover journals a command as accepted, as a bcd that died after
// journaling it would have left it.
func crashLeftover(t *testing.T, dir string, rec journal.Record) {
	t.Helper()
	j, err := journal.Open(nil, dir, journal.Options{})
	require.NoError(t, err)
	defer j.Close()
	rec.NodeID = nodeID
	rec.State = journal.StateAccepted
	rec.AcceptedAt = time.Now()
	if rec.NotAfter.IsZero() {
		rec.NotAfter = time.Now().Add(10 * time.Minute)
	}
	_, inserted, err := j.Insert(rec)
	require.NoError(t, err)
	require.True(t, inserted)
}

func payload(t *testing.T, v any) json.RawMessage {
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return b
}

func TestRecover_SettlesWhatACrashLeft(t *testing.T) {
	// Spec: "A command the daemon accepted but never started runs again only
	// if it is retry-safe; otherwise it fails with interrupted" and "A new
	// boot ... on rejoin completes them as succeeded with rebooted: true".
	dir := t.TempDir()
	retry := newHold(t, false)
	crashLeftover(t, dir, journal.Record{ID: "cmd_retry", Kind: "bcdcore.hold", Lane: kind.LaneControl, Flags: kind.Flags{RetrySafe: true}, Payload: payload(t, retry), BootID: "boot-1"})
	once := newHold(t, false)
	crashLeftover(t, dir, journal.Record{ID: "cmd_once", Kind: "bcdcore.holdonce", Lane: kind.LaneControl, Payload: payload(t, once), BootID: "boot-1"})
	crashLeftover(t, dir, journal.Record{ID: "cmd_rebooted", Kind: "bcdcore.reboot", Flags: kind.Flags{SelfTerminating: true}, BootID: "boot-0"})
	crashLeftover(t, dir, journal.Record{ID: "cmd_not_rebooted", Kind: "bcdcore.reboot", Flags: kind.Flags{SelfTerminating: true}, BootID: "boot-1"})
	late := newHold(t, false)
	crashLeftover(t, dir, journal.Record{ID: "cmd_late", Kind: "bcdcore.hold", Flags: kind.Flags{RetrySafe: true}, Payload: payload(t, late), NotAfter: time.Now().Add(-time.Second)})
	crashLeftover(t, dir, journal.Record{ID: "cmd_gone_kind", Kind: "vendor.removed", Flags: kind.Flags{RetrySafe: true}})

	n := start(t, dir, nil) // boot-1
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sub := n.d.Subscribe(ctx)
	rep, err := n.d.Recover(context.Background())
	require.NoError(t, err)
	require.Equal(t, []string{"cmd_retry"}, rep.Rerun)
	require.ElementsMatch(t, []string{"cmd_once", "cmd_late", "cmd_gone_kind"}, rep.Interrupted)
	require.Equal(t, []string{"cmd_rebooted"}, rep.Rebooted)
	require.Equal(t, []string{"cmd_not_rebooted"}, rep.NotRebooted)

	// Every outcome reaches the subscriber (the session client).
	outcomes := map[string]Update{}
	timeout := time.After(60 * time.Second)
	for len(outcomes) < 6 {
		select {
		case u := <-sub:
			if u.Terminal() {
				outcomes[u.CommandID] = u
			}
		case <-timeout:
			t.Fatalf("outcomes so far: %v", outcomes)
		}
	}
	require.Equal(t, journal.StateSucceeded, outcomes["cmd_retry"].State)
	require.Equal(t, 1, retry.runs(t), "the retry-safe command ran again")
	require.Equal(t, journal.StateFailed, outcomes["cmd_once"].State)
	require.Equal(t, "interrupted", outcomes["cmd_once"].Reason)
	require.Zero(t, once.runs(t), "not run again")
	require.Equal(t, journal.StateSucceeded, outcomes["cmd_rebooted"].State)
	require.True(t, outcomes["cmd_rebooted"].Rebooted)
	require.Equal(t, journal.StateFailed, outcomes["cmd_not_rebooted"].State)
	require.Equal(t, journal.ReasonNotRebooted, outcomes["cmd_not_rebooted"].Reason)
	require.Equal(t, "interrupted", outcomes["cmd_late"].Reason)
	require.Zero(t, late.runs(t), "past not_after: running it late could do harm")
	require.Equal(t, "interrupted", outcomes["cmd_gone_kind"].Reason)

	rec, _, err := n.j.Get("cmd_retry")
	require.NoError(t, err)
	require.Equal(t, journal.StateSucceeded, rec.State)
	un, err := n.j.Unfinished()
	require.NoError(t, err)
	require.Empty(t, un)
}

func TestClose_IsNotACancel(t *testing.T) {
	// A stop of bcd mid-command leaves the command to the next start's
	// Recover: a retry-safe kind runs again, it is not reported cancelled.
	n := start(t, "", nil)
	h := newHold(t, true)
	c := cmd("cmd_restart", "bcdcore.hold", h)
	ch, err := n.d.Submit(context.Background(), c)
	require.NoError(t, err)
	h.waitStarted(t)
	dir := n.dir
	n.stop()
	for _, u := range collect(t, ch) {
		require.False(t, u.Terminal(), "no outcome is reported for a stopped command: %+v", u)
	}
	h.release(t)
	n = start(t, dir, nil)
	rep, err := n.d.Recover(context.Background())
	require.NoError(t, err)
	require.Equal(t, []string{"cmd_restart"}, rep.Rerun)
	ch, err = n.d.Submit(context.Background(), c) // re-attach
	require.NoError(t, err)
	out := last(t, collect(t, ch))
	require.Equal(t, journal.StateSucceeded, out.State)
	require.Equal(t, 2, h.runs(t))
}

func TestSelfTerminating_JournaledWithTheBootIDAndCompletedByTheNewBoot(t *testing.T) {
	// Spec: "bcd journals the command with the current boot id before the
	// call" and "A new boot ... completes them as succeeded with rebooted".
	n := start(t, "", nil)
	ch, err := n.d.Submit(context.Background(), cmd("cmd_reboot", "bcdcore.reboot", map[string]any{}))
	require.NoError(t, err)
	for _, u := range collect(t, ch) {
		require.False(t, u.Terminal(), "a reboot is not complete until the new boot: %+v", u)
	}
	rec, _, err := n.j.Get("cmd_reboot")
	require.NoError(t, err)
	require.False(t, rec.State.Terminal())
	require.Equal(t, "boot-1", rec.BootID)

	dir := n.dir
	n.stop()
	n = start(t, dir, func(c *Config) { c.BootID = "boot-2" })
	rep, err := n.d.Recover(context.Background())
	require.NoError(t, err)
	require.Equal(t, []string{"cmd_reboot"}, rep.Rebooted)
	ch, err = n.d.Submit(context.Background(), cmd("cmd_reboot", "bcdcore.reboot", map[string]any{}))
	require.NoError(t, err)
	us := collect(t, ch)
	require.Len(t, us, 1)
	require.Equal(t, journal.StateSucceeded, us[0].State)
	require.True(t, us[0].Rebooted)
}
