package main_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/controlplane/modules/rollout"
	"github.com/better-compute/commands/controlplane/server"
)

// yamlBlocks returns the ```yaml blocks of the markdown file's section that
// starts at heading, up to the next top-level (##) heading.
func yamlBlocks(t *testing.T, file, heading string) []string {
	t.Helper()
	b, err := os.ReadFile(file)
	require.NoError(t, err)
	s := string(b)
	i := strings.Index(s, heading)
	require.GreaterOrEqual(t, i, 0)
	s = s[i:]
	if j := strings.Index(s, "\n## "); j >= 0 {
		s = s[:j]
	}
	var out []string
	for {
		start := strings.Index(s, "```yaml\n")
		if start < 0 {
			return out
		}
		s = s[start+len("```yaml\n"):]
		end := strings.Index(s, "```")
		out = append(out, s[:end])
		s = s[end+3:]
	}
}

// The shipped example keeps the platform's modules off; the operator
// guide's "Enabling it" blocks load and turn both on, and name the
// platform's approver key.
func TestModulesConfigAsDocumented(t *testing.T) {
	cfg, err := server.LoadConfig("server.example.yaml")
	require.NoError(t, err)
	require.False(t, cfg.Modules.Remediation.Enabled)
	require.False(t, cfg.Modules.Reconciler.Enabled)
	require.Equal(t, 5, cfg.Modules.MaxRemediationsPerWeek)
	// Issue 35: the passes and waits are configuration, the example
	// showing their defaults.
	require.EqualValues(t, 5*time.Minute, cfg.Modules.Cooldown)
	require.EqualValues(t, rollout.DefaultEvery, cfg.Modules.Rollout.Interval)
	require.EqualValues(t, rollout.DefaultRejoinGrace, cfg.Modules.Rollout.RejoinGrace)

	blocks := yamlBlocks(t, filepath.Join("..", "..", "..", "docs", "operator-guide.md"), "### Enabling it, and who approves")
	require.Len(t, blocks, 2)
	dir := t.TempDir()
	for i, want := range []func(server.Config){
		func(c server.Config) {
			require.True(t, c.Modules.Remediation.Enabled)
			require.True(t, c.Modules.Reconciler.Enabled)
			require.EqualValues(t, 90e9, c.Modules.StaleAfter)
			require.EqualValues(t, 2*time.Minute, c.Modules.Cooldown)
			require.EqualValues(t, 10*time.Second, c.Modules.Rollout.Interval)
		},
		func(c server.Config) {
			require.Equal(t, "/etc/bc-server/platform-approver.pem", c.PKI.PlatformApproverKey)
		},
	} {
		p := filepath.Join(dir, "c.yaml")
		require.NoError(t, os.WriteFile(p, []byte(blocks[i]), 0o600))
		c, err := server.LoadConfig(p)
		require.NoError(t, err, blocks[i])
		want(c)
	}
}
