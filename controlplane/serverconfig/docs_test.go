package serverconfig_test

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/controlplane/serverconfig"
	"github.com/better-compute/commands/internal/testutil"
)

// The operator guide's bc-server table names every key bc-server's config
// file takes: a key without a row is a setting no operator finds.
func TestOperatorGuideTableNamesEveryServerKey(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "docs", "operator-guide.md"))
	require.NoError(t, err)
	doc := string(b)
	const intro = "`bc-server` reads a YAML file (`--config`)"
	i := strings.Index(doc, intro)
	require.GreaterOrEqual(t, i, 0, "the operator guide has %q", intro)
	var table []string
	for _, l := range strings.Split(doc[i:], "\n")[1:] {
		if strings.HasPrefix(l, "|") {
			table = append(table, l)
		} else if len(table) > 0 {
			break
		}
	}
	require.NotEmpty(t, table)
	rows := strings.Join(table, "\n")
	// The identities under auth and the support bundle store are
	// documented as a whole, each in a section of its own.
	ks := testutil.ConfigKeys(reflect.TypeOf(serverconfig.Config{}), "yaml", "auth", "supportBundles")
	require.Contains(t, ks, "pki.commandSigning")
	for _, k := range ks {
		require.Contains(t, rows, "`"+k+"`", "docs/operator-guide.md's bc-server table has a row for %s", k)
	}
}
