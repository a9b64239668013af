package config

import (
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/internal/testutil"
)

// The operator guide's table of bcd's configuration file has a row for
// every key bcd reads, and no row for a key it does not: bcd refuses
// unknown keys, so a row for another program's key (bc-server's
// components, say) is a config that does not start.
func TestOperatorGuideTableIsBcdsKeys(t *testing.T) {
	var rows []string
	for _, r := range testutil.MarkdownTable(t, filepath.Join("..", "..", "docs", "operator-guide.md"), "### bcd's configuration file") {
		if strings.HasPrefix(r, "| `") {
			rows = append(rows, r)
		}
	}
	require.NotEmpty(t, rows)
	ks := testutil.ConfigKeys(reflect.TypeOf(Config{}), "json")
	require.Contains(t, ks, "lanes.bulk")
	documented := map[string]bool{}
	for _, r := range rows {
		first := strings.SplitN(r, "|", 3)[1]
		for _, m := range regexp.MustCompile("`([^`]+)`").FindAllStringSubmatch(first, -1) {
			documented[m[1]] = true
		}
	}
	for _, k := range ks {
		require.True(t, documented[k], "docs/operator-guide.md's bcd table has a row for %s", k)
	}
	for k := range documented {
		require.Contains(t, ks, k, "docs/operator-guide.md's bcd table names %s, which bcd's config does not have", k)
	}
}
