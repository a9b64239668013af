// Package docs holds tests of the pages that need more than one side of the
// project: that every configuration example in them loads, with the loader
// of the program it is for.
package docs_test

import (
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	bcdconfig "github.com/better-compute/commands/bcd/config"
	"github.com/better-compute/commands/controlplane/server/serverconfig"
	"github.com/better-compute/commands/internal/testutil"
)

type yamlBlock struct {
	where string // file:line of its first line
	text  string
}

// yamlBlocks returns every ```yaml block of the pages in this directory.
func yamlBlocks(t *testing.T) []yamlBlock {
	t.Helper()
	files, err := filepath.Glob("*.md")
	require.NoError(t, err)
	require.NotEmpty(t, files)
	var out []yamlBlock
	for _, f := range files {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		var (
			cur    *yamlBlock
			indent string // the fence's: a block in a list item is indented
		)
		for i, l := range strings.Split(string(b), "\n") {
			switch {
			case cur == nil && strings.TrimSpace(l) == "```yaml":
				cur = &yamlBlock{where: f + ":" + strconv.Itoa(i+2)}
				indent = l[:strings.Index(l, "```")]
			case cur != nil && strings.TrimSpace(l) == "```":
				out = append(out, *cur)
				cur = nil
			case cur != nil:
				cur.text += strings.TrimPrefix(l, indent) + "\n"
			}
		}
		require.Nil(t, cur, "%s: a yaml block that never closes", f)
	}
	return out
}

// elsewhere are the blocks for other programs, each with the test that
// loads it. The key is the block's first line.
var elsewhere = map[string]string{
	"# ~/.config/better-compute/config.yaml": "controlplane/front/cli TestCLIReferenceConfigFileWorksAsWritten",
	"identities:":                            "controlplane/front/mcp (bc-mcp's identities file)",
	"bmcs:":                                  "e2e/metal_test.go reads docs/metal.md's site agent blocks",
	"grants:":                                "a fragment of an identity in auth (secrets.md), shown inside one",
	"    s3:":                                "a fragment of supportBundles.blob, shown with the whole one above it",
}

// Every YAML example in docs/ loads with the strict loader of the program
// it configures: bcd's (config.Parse: unknown keys are errors) or
// bc-server's (serverconfig.LoadConfig: the same), so no page shows a key
// that the program refuses, or a value of the wrong type.
func TestEveryConfigExampleLoads(t *testing.T) {
	bcdKeys := map[string]bool{}
	for _, k := range testutil.ConfigKeys(reflect.TypeOf(bcdconfig.Config{}), "json") {
		top, _, _ := strings.Cut(k, ".")
		bcdKeys[top] = true
	}
	require.True(t, bcdKeys["pluginEnv"])
	loaded := 0
	for _, b := range yamlBlocks(t) {
		first := strings.SplitN(b.text, "\n", 2)[0]
		if why, ok := elsewhere[first]; ok {
			require.NotEmpty(t, why)
			continue
		}
		// bcd's when every top-level key is one of bcd's; bc-server's
		// otherwise (its loader then names a key that is neither's).
		var top map[string]any
		require.NoError(t, yaml.Unmarshal([]byte(b.text), &top), "%s: not YAML:\n%s", b.where, b.text)
		forBcd := len(top) > 0
		for k := range top {
			forBcd = forBcd && bcdKeys[k]
		}
		switch {
		case forBcd:
			_, err := bcdconfig.Parse([]byte(b.text))
			require.NoError(t, err, "%s: bcd refuses this example:\n%s", b.where, b.text)
		default:
			p := filepath.Join(t.TempDir(), "server.yaml")
			require.NoError(t, os.WriteFile(p, []byte(b.text), 0o600))
			_, err := serverconfig.LoadConfig(p)
			require.NoError(t, err, "%s: bc-server refuses this example (if it is for another program, add its first line to elsewhere):\n%s", b.where, b.text)
		}
		loaded++
	}
	require.GreaterOrEqual(t, loaded, 10)
}
