package handoff

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/bcd/journal"
	"github.com/better-compute/commands/internal/upgrade"
)

func layout(t *testing.T, versions ...string) upgrade.Layout {
	t.Helper()
	l := upgrade.Layout{Root: t.TempDir()}
	for _, v := range versions {
		require.NoError(t, os.MkdirAll(l.VersionDir(v), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(l.VersionDir(v), upgrade.DaemonBinary), nil, 0o755))
	}
	return l
}

var rec = journal.Record{ID: "cmd_up", Kind: upgrade.KindName}

// A bcd that stopped before the plugin journaled the handoff: interrupted,
// nothing activated.
func TestRecovered_NoHandoffIsInterrupted(t *testing.T) {
	u := &Upgrades{Layout: layout(t, "1.0.0"), Version: "1.0.0"}
	out, pending := u.Recovered(rec)
	require.False(t, pending)
	require.Equal(t, journal.StateFailed, out.State)
	require.Equal(t, journal.ReasonInterrupted, out.Reason)
}

// The old daemon after a rollback reports failed with the reason and what
// the helper tried.
func TestRecovered_RolledBackReportsWhatWasTried(t *testing.T) {
	l := layout(t, "1.0.0", "1.1.0")
	require.NoError(t, l.Begin(upgrade.State{CommandID: rec.ID, From: "1.0.0", To: "1.1.0", Deadline: time.Now()}))
	require.NoError(t, l.Transition(func(s *upgrade.State, _ bool) error {
		s.Step, s.Outcome, s.Reason, s.Message = upgrade.StepDone, upgrade.OutcomeRolledBack, upgrade.ReasonRolledBack, "1.1.0 did not rejoin"
		s.Tried = []string{"activated 1.1.0", "activated 1.0.0 again"}
		return nil
	}))
	u := &Upgrades{Layout: l, Version: "1.0.0"}
	out, pending := u.Recovered(rec)
	require.False(t, pending)
	require.Equal(t, journal.StateFailed, out.State)
	require.Equal(t, upgrade.ReasonRolledBack, out.Reason)
	var r Result
	require.NoError(t, json.Unmarshal(out.Result, &r))
	require.Equal(t, []string{"activated 1.1.0", "activated 1.0.0 again"}, r.Tried)
}

// The new daemon waits for its Welcome; the old one whose helper is gone
// finishes the upgrade as aborted with the old version active.
func TestRecovered_NewDaemonPendsOldDaemonWithoutHelperAborts(t *testing.T) {
	l := layout(t, "1.0.0", "1.1.0")
	require.NoError(t, l.Activate("1.1.0"))
	require.NoError(t, l.Begin(upgrade.State{CommandID: rec.ID, From: "1.0.0", To: "1.1.0", Deadline: time.Now().Add(time.Minute)}))
	require.NoError(t, l.Transition(func(s *upgrade.State, _ bool) error { s.Step = upgrade.StepSwapped; return nil }))

	_, pending := (&Upgrades{Layout: l, Version: "1.1.0"}).Recovered(rec)
	require.True(t, pending, "the new daemon settles once it rejoined")

	out, pending := (&Upgrades{Layout: l, Version: "1.0.0"}).Recovered(rec)
	require.False(t, pending)
	require.Equal(t, upgrade.ReasonHandoffLost, out.Reason)
	cur, err := l.CurrentVersion()
	require.NoError(t, err)
	require.Equal(t, "1.0.0", cur, "the old version is active again")
	st, err := l.ReadState()
	require.NoError(t, err)
	require.Equal(t, upgrade.OutcomeAborted, st.Outcome)
}
