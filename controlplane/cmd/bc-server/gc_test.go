package main

import (
	"runtime/debug"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/controlplane/gctune"
)

// The operator guide: "bc-server runs Go's garbage collector at GOGC=50 …
// unless the environment sets GOGC (then the operator's value wins …; the
// start-up log says which, at debug level)". The database is unreachable,
// so bc-server stops right after saying it.
func TestStartupLogSaysTheCollectorTarget(t *testing.T) {
	before := debug.SetGCPercent(100)
	t.Cleanup(func() { debug.SetGCPercent(before) })
	for _, c := range []struct{ env, want string }{
		{"", "gc_percent=50 from_GOGC=false"},
		{"200", "gc_percent=200 from_GOGC=true"},
	} {
		t.Run("GOGC="+c.env, func(t *testing.T) {
			t.Setenv("GOGC", c.env)
			debug.SetGCPercent(100)
			code, _, errs := runArgs("--log-level", "debug", "--database-url", "postgres://127.0.0.1:1/none?connect_timeout=1")
			require.Equal(t, 1, code, errs)
			require.Contains(t, errs, "garbage collection target: "+c.want)
			if c.env == "" {
				p := debug.SetGCPercent(100)
				require.Equal(t, gctune.Percent, p, "the collector runs at the target the log names")
			}
		})
	}
}
