package names_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/internal/names"
	"github.com/better-compute/commands/sdk/kind"
)

func TestIDGrammar(t *testing.T) {
	for _, ok := range []string{"node_a1", "node_01J0EXAMPLE", "tenant_a", "cmd_01HZZZ", "n", "0", "gpu-0412.rack-3",
		strings.Repeat("n", names.MaxIDLen)} {
		require.NoError(t, names.ID("nodeId", ok), ok)
	}
	for _, bad := range []string{"", "node with spaces", strings.Repeat("n", names.MaxIDLen+1), strings.Repeat("n", 5000),
		"node_ünïcode", "*", "tenant_*", strings.Repeat("t", 100000), "node\x00", "_node", ".node", "-node",
		"compute-node/x", "a:b", "node\n"} {
		err := names.ID("nodeId", bad)
		require.ErrorIs(t, err, names.ErrInvalid, "%q", bad)
		require.Contains(t, err.Error(), "nodeId")
		require.Less(t, len(err.Error()), 300, "the error quotes a long id short")
	}
}

func TestRoles(t *testing.T) {
	for _, r := range []string{"node", "discovery", "site"} {
		require.NoError(t, names.Role(r))
	}
	for _, r := range []string{"", "admin", "ROOT!", "Node", "node\x00"} {
		require.ErrorIs(t, names.Role(r), names.ErrInvalid, "%q", r)
	}
}

// names.Kind accepts exactly the kind names a manifest may have.
func TestKindGrammarIsTheManifests(t *testing.T) {
	for _, k := range []string{"diag.nvml", "site.httpProxy", "a.b.c", "diag2.x9", "diag", "Diag.nvml", "diag.Nvml",
		"diag..nvml", "diag.nvml.", ".diag", "diag_x.y", "diag.n-x", "diag.nvml\x00", "9.x", "x.9"} {
		m := kind.Manifest{Kind: k, Lane: kind.LaneControl, Timeout: kind.Duration(time.Minute), Roles: []string{"node"}, Version: "1.0.0"}
		require.Equal(t, m.Validate() == nil, names.Kind(k) == nil, "%q", k)
	}
}
