package site_test

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/plugins/internal/site"
)

// docBlock returns the fenced block that follows marker in docs/metal.md.
func docBlock(t *testing.T, marker string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "..", "docs", "metal.md"))
	require.NoError(t, err)
	m := regexp.MustCompile(`(?s)<!-- ` + regexp.QuoteMeta(marker) + ` -->\s*` + "```" + `[a-z]*\n(.*?)` + "```").FindSubmatch(b)
	require.NotNil(t, m, "docs/metal.md has no block after <!-- %s -->", marker)
	return string(m[1])
}

// The inventory docs/metal.md shows is one the site agent accepts.
func TestDocumentedInventoryParses(t *testing.T) {
	inv, err := site.ParseInventory([]byte(docBlock(t, "site-inventory.yaml")))
	require.NoError(t, err)
	b, err := inv.Lookup("rack4-u12")
	require.NoError(t, err)
	require.Equal(t, []string{"redfish", "ipmi"}, b.Providers)
	require.Equal(t, "/etc/bcd/bmc-credentials", inv.Credentials.Dir)
	require.Len(t, b.Proxy.Allow, 2)
}
