package scripts_test

import (
	"bytes"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// Issue 33: `go doc ./sdk/kind` in a checkout printed module proxy errors
// before the docs. go doc first lists every module of the build list (go
// list -m all), which needs each one's .info; buf's tree, then pinned in the
// root go.mod's tool block, named modules that the proxy does not serve.
// The tools now live in tools/go.mod, outside the root module's graph. Both
// spellings, through go.work (a developer's default) and without it (as
// make runs), print the docs and nothing on stderr.
func TestGoDocOfTheSDKPrintsNoErrors(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go doc, which lists the module graph")
	}
	var base []string
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); k != "GOWORK" && k != "GOFLAGS" {
			base = append(base, kv)
		}
	}
	for _, workspace := range []bool{true, false} {
		for _, pkg := range []string{"./sdk/kind", "github.com/better-compute/commands/sdk/kind"} {
			cmd := exec.Command("go", "doc", pkg)
			cmd.Dir = root
			cmd.Env = base
			if !workspace {
				cmd.Env = append(cmd.Env, "GOWORK=off")
			}
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			require.NoError(t, err, "go doc %s (workspace %v): %s", pkg, workspace, stderr.String())
			require.Empty(t, stderr.String(), "go doc %s (workspace %v) prints only the docs", pkg, workspace)
			first, _, _ := strings.Cut(stdout.String(), "\n")
			require.Equal(t, `package kind // import "github.com/better-compute/commands/sdk/kind"`, first)
			require.Contains(t, stdout.String(), "func Serve(kinds ...Kind)")
		}
	}
}
