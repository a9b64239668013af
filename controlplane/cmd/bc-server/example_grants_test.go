package main_test

import (
	"os"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/better-compute/commands/controlplane/server"
	"github.com/better-compute/commands/controlplane/trust/auth"
)

// shortPermissions are the words an example's comment uses for each
// permission the API checks.
var shortPermissions = map[string]string{
	"exec":           auth.PermNodesExec,
	"read":           auth.PermNodesRead,
	"create":         auth.PermNodesCreate,
	"admin":          auth.PermNodesAdmin,
	"tenants:create": auth.PermTenantsCreate,
}

// Every identity of the shipped example grants exactly the permissions its
// comment names before the colon: "compute:nodes:*" commented "exec and
// read" also granted admin (join tokens, specs, deletion) and create.
func TestExampleGrantsAreWhatTheirCommentsSay(t *testing.T) {
	cfg, err := server.LoadConfig("server.example.yaml")
	require.NoError(t, err)
	b, err := os.ReadFile("server.example.yaml")
	require.NoError(t, err)
	var doc yaml.Node
	require.NoError(t, yaml.Unmarshal(b, &doc))
	claims := map[string]string{}
	collectNameComments(&doc, claims)

	require.Len(t, shortPermissions, len(auth.Permissions), "every permission the API checks has its word")
	require.NotEmpty(t, cfg.Auth.Identities)
	for _, id := range cfg.Auth.Identities {
		comment, ok := claims[id.Name]
		require.True(t, ok, "identity %s has a comment on its name", id.Name)
		claim, _, ok := strings.Cut(strings.TrimSpace(strings.TrimPrefix(comment, "#")), ": ")
		require.True(t, ok, "%s's comment %q names its permissions before a colon", id.Name, comment)
		var claimed []string
		for _, w := range strings.FieldsFunc(strings.ReplaceAll(claim, " and ", ","), func(r rune) bool { return r == ',' }) {
			w = strings.TrimSpace(w)
			p, known := shortPermissions[w]
			require.True(t, known, "%s's comment names %q, not a permission", id.Name, w)
			claimed = append(claimed, p)
		}
		sort.Strings(claimed)
		var granted []string
		for _, p := range auth.Permissions {
			for _, g := range id.Grants {
				if auth.Match(g.Permission, p) {
					granted = append(granted, p)
					break
				}
			}
		}
		sort.Strings(granted)
		require.Equal(t, claimed, granted, "identity %s: its comment says %q", id.Name, comment)
	}
}

// collectNameComments maps each identity's name to the line comment on it.
func collectNameComments(n *yaml.Node, out map[string]string) {
	if n.Kind == yaml.MappingNode {
		for i := 0; i+1 < len(n.Content); i += 2 {
			if k, v := n.Content[i], n.Content[i+1]; k.Value == "name" && v.Kind == yaml.ScalarNode {
				out[v.Value] = v.LineComment
			}
		}
	}
	for _, c := range n.Content {
		collectNameComments(c, out)
	}
}
