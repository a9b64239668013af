package serverconfig_test

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/controlplane/serverconfig"
)

// keys lists t's YAML keys as dotted paths. Sections documented elsewhere
// as a whole (the identities under auth, the support bundle store) are one
// key each.
func keys(t reflect.Type, prefix string) []string {
	var out []string
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if name == "" || name == "-" {
			continue
		}
		path := prefix + name
		ft := f.Type
		if ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		if ft.Kind() == reflect.Struct && path != "auth" && path != "supportBundles" && ft.NumField() > 0 && ft.Field(0).Tag.Get("yaml") != "" {
			out = append(out, keys(ft, path+".")...)
			continue
		}
		out = append(out, path)
	}
	return out
}

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
	ks := keys(reflect.TypeOf(serverconfig.Config{}), "")
	require.Contains(t, ks, "pki.commandSigning")
	for _, k := range ks {
		require.Contains(t, rows, "`"+k+"`", "docs/operator-guide.md's bc-server table has a row for %s", k)
	}
}
