package serverconfig_test

import (
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/controlplane/server/serverconfig"
	"github.com/better-compute/commands/internal/testutil"
)

// The operator guide's bc-server table names every key bc-server's config
// file takes: a key without a row is a setting no operator finds.
func TestOperatorGuideTableNamesEveryServerKey(t *testing.T) {
	rows := strings.Join(testutil.MarkdownTable(t, filepath.Join(testutil.RepoRoot(t), "docs", "operator-guide.md"), "`bc-server` reads a YAML file (`--config`)"), "\n")
	// The identities under auth and the support bundle store are
	// documented as a whole, each in a section of its own.
	ks := testutil.ConfigKeys(reflect.TypeOf(serverconfig.Config{}), "yaml", "auth", "supportBundles")
	require.Contains(t, ks, "pki.commandSigning")
	for _, k := range ks {
		require.Contains(t, rows, "`"+k+"`", "docs/operator-guide.md's bc-server table has a row for %s", k)
	}
}
