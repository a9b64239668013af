package packaging

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// notShipped are the control plane commands no package installs, each with
// why: a new controlplane/cmd/* must be shipped or named here.
var notShipped = map[string]string{
	"bc-sim": "the fleet simulator, for benchmarks and load tests (make bench), not for a control plane host",
}

// Issue 31: "bc-mcp ships in no package; it belongs in the bc-server
// package with its own unit or documented invocation." Every control plane
// command is built by scripts/build-packages, installed in /usr/bin by the
// bc-server recipe, listed by scripts/check-packages' rpm check, and named
// in the package's README.
func TestServerRecipe_ShipsEveryControlPlaneCommand(t *testing.T) {
	r := readRecipe(t, "bc-server")
	build, err := os.ReadFile("../scripts/build-packages")
	require.NoError(t, err)
	check, err := os.ReadFile("../scripts/check-packages")
	require.NoError(t, err)
	readme, err := os.ReadFile("bc-server/README.md")
	require.NoError(t, err)
	cmds, err := filepath.Glob("../controlplane/cmd/*")
	require.NoError(t, err)
	shipped := 0
	for _, c := range cmds {
		name := filepath.Base(c)
		if _, skip := notShipped[name]; skip {
			continue
		}
		shipped++
		src, _, mode := dst(t, r, "/usr/bin/"+name)
		require.Equal(t, "dist/stage/"+name, src)
		require.Equal(t, 0o755, mode)
		require.Contains(t, string(build), "./controlplane/cmd/"+name, "scripts/build-packages builds %s", name)
		require.Contains(t, string(check), "/usr/bin/"+name+" ", "scripts/check-packages expects %s in the rpm", name)
		require.Contains(t, string(readme), "| /usr/bin/"+name+" |", "the package README names %s", name)
	}
	require.GreaterOrEqual(t, shipped, 3, "bc-server, better-compute and bc-mcp")
	_, _, _ = dst(t, r, "/usr/bin/bc-mcp")
	require.Contains(t, string(readme), `"command": "/usr/bin/bc-mcp"`, "the README shows how an MCP client starts bc-mcp")
	require.True(t, strings.Contains(string(check), `bc-mcp --version`), "check-packages runs the packaged bc-mcp")
}
