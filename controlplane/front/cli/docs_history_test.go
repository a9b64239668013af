package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/controlplane/server/serverconfig"
	"github.com/better-compute/commands/internal/testutil"
)

// guideBlock is the first fenced block of lang after heading in the
// operator guide.
func guideBlock(t *testing.T, heading, lang string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(testutil.RepoRoot(t), "docs", "operator-guide.md"))
	require.NoError(t, err)
	s := string(b)
	i := strings.Index(s, heading)
	require.GreaterOrEqual(t, i, 0, "the guide has %q", heading)
	s = s[i:]
	start := strings.Index(s, "```"+lang+"\n")
	require.GreaterOrEqual(t, start, 0)
	s = s[start+len(lang)+4:]
	return s[:strings.Index(s, "```")]
}

// The operator guide's history retention section: its configuration
// loads, and its procedure, run as written against an archive whose rows
// are gone, finds the command and exports the tenant's records.
func TestOperatorGuideHistoryProcedureRunsAsWritten(t *testing.T) {
	dir := t.TempDir()
	yml := filepath.Join(dir, "history.yaml")
	require.NoError(t, os.WriteFile(yml, []byte(guideBlock(t, "## 13. History retention", "yaml")), 0o600))
	c, err := serverconfig.LoadConfig(yml)
	require.NoError(t, err)
	days, tenants, err := c.History.Policy()
	require.NoError(t, err)
	require.Equal(t, 90, days)
	require.Equal(t, 365, tenants["acme"])

	cfg, _ := archivedHistory(t)
	lines := strings.Split(strings.TrimSpace(guideBlock(t, "To find a command settled long ago", "sh")), "\n")
	t.Chdir(dir)
	require.Len(t, lines, 3)
	for i, l := range lines {
		l = strings.NewReplacer("$TENANT", "acme", "cmd_…", "cmd_old1", "node_…", "node_1", "/etc/bc-server/server.yaml", cfg).Replace(l)
		args := strings.Fields(l)
		require.Equal(t, "better-compute", args[0])
		code, out, errOut := runHistory(args[1:]...)
		require.Equal(t, ExitOK, code, "%s: %s", l, errOut)
		switch i {
		case 0:
			require.Contains(t, out, "cmd_old1")
		case 1:
			require.Contains(t, out, `"events":[`)
		case 2:
			b, err := os.ReadFile(filepath.Join(dir, "history.jsonl"))
			require.NoError(t, err)
			require.Equal(t, 3, strings.Count(string(b), "\n"))
		}
	}
}
