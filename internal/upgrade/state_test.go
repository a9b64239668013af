package upgrade

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func layout(t *testing.T, versions ...string) Layout {
	t.Helper()
	l := Layout{Root: t.TempDir()}
	for _, v := range versions {
		require.NoError(t, os.MkdirAll(l.VersionDir(v), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(l.VersionDir(v), DaemonBinary), []byte(v), 0o755))
	}
	return l
}

// The swap is a symlink renamed over the old one; a version without its
// bcd is never activated, so current always names a whole version.
func TestActivate(t *testing.T) {
	l := layout(t, "1.0.0", "1.1.0")
	require.NoError(t, l.Activate("1.0.0"))
	v, err := l.CurrentVersion()
	require.NoError(t, err)
	require.Equal(t, "1.0.0", v)
	require.NoError(t, l.Activate("1.1.0"))
	v, err = l.CurrentVersion()
	require.NoError(t, err)
	require.Equal(t, "1.1.0", v)
	require.Error(t, l.Activate("2.0.0"), "no such version")
	require.Error(t, l.Activate("../etc"))
	v, err = l.CurrentVersion()
	require.NoError(t, err)
	require.Equal(t, "1.1.0", v, "a refused activation changes nothing")
}

// The rejoin marker lands only on a swapped upgrade to the daemon's own
// version; once the helper decided to roll back, it can no longer land.
func TestMarkRejoinedLosesToTheRollbackDecision(t *testing.T) {
	l := layout(t)
	require.NoError(t, l.Begin(State{CommandID: "cmd_1", From: "1.0.0", To: "1.1.0", Deadline: time.Now().Add(time.Minute)}))
	_, marked, err := l.MarkRejoined("1.1.0")
	require.NoError(t, err)
	require.False(t, marked, "not swapped yet")
	require.NoError(t, l.Transition(func(s *State, _ bool) error { s.Step = StepSwapped; return nil }))
	_, marked, err = l.MarkRejoined("1.0.0")
	require.NoError(t, err)
	require.False(t, marked, "another version's daemon")
	require.NoError(t, l.Transition(func(s *State, _ bool) error { s.Step = StepRollingBack; return nil }))
	_, marked, err = l.MarkRejoined("1.1.0")
	require.NoError(t, err)
	require.False(t, marked, "the helper gave up first")

	require.ErrorContains(t, l.Begin(State{CommandID: "cmd_2", From: "1.0.0", To: "1.1.0"}), "has not finished", "a rolling-back upgrade is not done")
}

func TestBeginRefusesWhileAnotherUpgradeIsOpen(t *testing.T) {
	l := layout(t)
	require.NoError(t, l.Begin(State{CommandID: "cmd_1", From: "1.0.0", To: "1.1.0"}))
	require.ErrorContains(t, l.Begin(State{CommandID: "cmd_2", From: "1.0.0", To: "1.2.0"}), "has not finished")
	require.NoError(t, l.Transition(func(s *State, _ bool) error { s.Outcome = OutcomeAborted; return nil }))
	require.NoError(t, l.Begin(State{CommandID: "cmd_2", From: "1.0.0", To: "1.2.0"}))
}

func TestHelperLockIsExclusive(t *testing.T) {
	l := layout(t)
	running, err := l.HelperRunning()
	require.NoError(t, err)
	require.False(t, running)
	release, ok, err := l.HoldHelper()
	require.NoError(t, err)
	require.True(t, ok)
	// flock is per open file description: a second open in this process
	// conflicts as another process's would.
	running, err = l.HelperRunning()
	require.NoError(t, err)
	require.True(t, running)
	release()
	running, err = l.HelperRunning()
	require.NoError(t, err)
	require.False(t, running)
}

func TestSkip(t *testing.T) {
	l := layout(t)
	require.NoError(t, l.Skip("1.1.0"))
	require.NoError(t, l.Skip("1.1.0"))
	s, err := l.Skipped()
	require.NoError(t, err)
	require.Equal(t, []string{"1.1.0"}, s)
}

func FuzzDecodeState(f *testing.F) {
	f.Add([]byte(`{"commandId":"cmd_1","from":"1.0.0","to":"1.1.0","deadline":"2026-01-01T00:00:00Z","step":"prepared","updatedAt":"2026-01-01T00:00:00Z"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := DecodeState(b)
		if err != nil {
			return
		}
		if s.CommandID == "" || ValidVersion(s.To) != nil || ValidVersion(s.From) != nil {
			t.Fatalf("decoded an incomplete state: %+v", s)
		}
	})
}
