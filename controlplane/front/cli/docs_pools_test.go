package cli_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/controlplane/server/servertest"
	"github.com/better-compute/commands/internal/testutil"
)

// shBlock returns the first ```sh block after heading in the markdown file.
func shBlock(t *testing.T, file, heading string) []string {
	t.Helper()
	b, err := os.ReadFile(file)
	require.NoError(t, err)
	s := string(b)
	i := strings.Index(s, heading)
	require.GreaterOrEqual(t, i, 0, "%s has %q", file, heading)
	s = s[i:]
	start := strings.Index(s, "```sh\n")
	require.GreaterOrEqual(t, start, 0)
	s = s[start+len("```sh\n"):]
	end := strings.Index(s, "```")
	require.GreaterOrEqual(t, end, 0)
	var out []string
	for _, l := range strings.Split(strings.TrimSpace(s[:end]), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, l)
		}
	}
	return out
}

// The operator guide's pools procedure (section 9, "Pools and budgets"),
// run as written, with the guide's node_… placeholder the test's node.
func TestOperatorGuidePoolsProcedureRunsAsWritten(t *testing.T) {
	t.Parallel()
	r := servertest.Start(t, nil)
	env := envFor(r, servertest.TokOps)
	env["BC_TENANT"] = servertest.TenantA
	lines := shBlock(t, filepath.Join(testutil.RepoRoot(t), "docs", "operator-guide.md"), "### Pools and budgets")
	require.Len(t, lines, 7)
	for _, l := range lines {
		args, ok := strings.CutPrefix(l, "better-compute ")
		require.True(t, ok, l)
		args = strings.ReplaceAll(args, "node_…", servertest.NodeA1)
		res := cliRun(context.Background(), env, strings.Fields(args)...)
		require.Equal(t, 0, res.code, "%s: %s", l, res.stderr)
		require.NotEmpty(t, res.stdout, l)
	}
	res := cliRun(context.Background(), env, "pools", "get", "gpu-a", "--json")
	require.Equal(t, 0, res.code, res.stderr)
	require.Contains(t, res.stdout, `"maxConcurrent": 2`)
	require.Contains(t, res.stdout, `"maxPerWindow": 10`)
}

// The operator guide's freeze (section 9: "maxConcurrent=0 … is refused
// unless you add stopAllMaintenance=true"), run as written: the freeze
// stores 0, lifting it stores 2, and the freeze without the confirmation
// is refused with the words the guide quotes.
func TestOperatorGuideBudgetFreezeRunsAsWritten(t *testing.T) {
	t.Parallel()
	r := servertest.Start(t, nil)
	env := envFor(r, servertest.TokOps)
	env["BC_TENANT"] = servertest.TenantA
	lines := shBlock(t, filepath.Join(testutil.RepoRoot(t), "docs", "operator-guide.md"), "which says you mean it:")
	require.Len(t, lines, 2)
	for i, want := range []string{`"maxConcurrent"`, `"maxConcurrent": 2`} {
		cmd, _, _ := strings.Cut(lines[i], "#")
		args, ok := strings.CutPrefix(strings.TrimSpace(cmd), "better-compute ")
		require.True(t, ok, lines[i])
		res := cliRun(context.Background(), env, strings.Fields(args)...)
		require.Equal(t, 0, res.code, "%s: %s", lines[i], res.stderr)
		res = cliRun(context.Background(), env, "pools", "get", "gpu-a", "--json")
		require.Equal(t, 0, res.code, res.stderr)
		if i == 0 {
			require.NotContains(t, res.stdout, want, "protojson leaves out a maxConcurrent of 0")
			continue
		}
		require.Contains(t, res.stdout, want)
	}
	res := cliRun(context.Background(), env, "pools", "set-budget", "pool=gpu-a", "maxConcurrent=0")
	require.Equal(t, 1, res.code)
	require.Contains(t, res.stderr, "stopAllMaintenance=true")
}
