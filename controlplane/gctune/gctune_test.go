package gctune

import (
	"runtime/debug"
	"testing"

	"github.com/stretchr/testify/require"
)

// current reads the collector's target without changing it.
func current() int {
	p := debug.SetGCPercent(100)
	debug.SetGCPercent(p)
	return p
}

func keep(t *testing.T) {
	p := current()
	t.Cleanup(func() { debug.SetGCPercent(p) })
}

func TestApplySetsTheTargetWhenGOGCIsUnset(t *testing.T) {
	keep(t)
	t.Setenv("GOGC", "")
	debug.SetGCPercent(100)
	p, env := Apply()
	require.Equal(t, Percent, p)
	require.False(t, env)
	require.Equal(t, Percent, current(), "the collector runs at the target Apply reports")
}

// "an operator's GOGC always wins": Apply leaves the runtime's own reading
// of GOGC in place and reports it.
func TestApplyLeavesAnOperatorsGOGC(t *testing.T) {
	for _, c := range []struct {
		env  string
		want int
	}{{"200", 200}, {"off", -1}, {"75", 75}} {
		t.Run(c.env, func(t *testing.T) {
			keep(t)
			t.Setenv("GOGC", c.env)
			debug.SetGCPercent(123) // what the runtime would have set from GOGC, here a marker
			p, env := Apply()
			require.True(t, env)
			require.Equal(t, c.want, p)
			require.Equal(t, 123, current(), "Apply did not touch the collector")
		})
	}
}
