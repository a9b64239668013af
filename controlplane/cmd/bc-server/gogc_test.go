package main

import (
	"fmt"
	"os"
	"os/exec"
	"runtime/debug"
	"testing"

	"github.com/stretchr/testify/require"
)

// The operator guide's "Memory and garbage collection": GOGC in
// bc-server's environment (a unit drop-in's Environment=GOGC=50) is the
// collector target bc-server runs at; nothing in its start-up overrides it.
// The test runs itself again as a child with GOGC set: the child starts
// bc-server (its database unreachable, so it stops once started) and
// prints the target it was left with.
func TestAnOperatorsGOGCIsTheTargetBcServerRunsAt(t *testing.T) {
	if os.Getenv("BC_TEST_GOGC_CHILD") == "1" {
		code, _, errs := runArgs("--database-url", "postgres://127.0.0.1:1/none?connect_timeout=1")
		fmt.Printf("exit=%d gc_percent=%d\n%s", code, debug.SetGCPercent(100), errs)
		return
	}
	for _, v := range []string{"50", "200"} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestAnOperatorsGOGCIsTheTargetBcServerRunsAt$", "-test.count=1")
		cmd.Env = append(os.Environ(), "BC_TEST_GOGC_CHILD=1", "GOGC="+v)
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, string(out))
		require.Contains(t, string(out), "exit=1 gc_percent="+v+"\n", "bc-server ran through its start-up:\n%s", out)
	}
}
