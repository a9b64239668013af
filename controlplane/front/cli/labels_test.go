package cli_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/controlplane/front/cli"
	"github.com/better-compute/commands/controlplane/server/servertest"
)

// nodes label sets key=value, removes -key (and key-), replaces the whole
// set with --replace; nodes get and list show the labels, list --selector
// keeps the nodes that match; a bad key is the server's INVALID_INPUT and
// a word of no known shape a usage error.
func TestNodesLabelAndSelector(t *testing.T) {
	t.Parallel()
	r := servertest.Start(t, nil)
	env := envFor(r, servertest.TokOps)
	env["BC_TENANT"] = servertest.TenantA
	ctx := context.Background()
	nodes := addNodes(t, r, 2)

	res := cliRun(ctx, env, "nodes", "label", nodes[0], "gpu=h200", "rack=r1", "zone=east")
	require.Equal(t, cli.ExitOK, res.code, res.stderr)
	require.Regexp(t, `(?m)^NODE\s+`+nodes[0]+`$`, res.stdout, "prints the node")
	require.Regexp(t, `(?m)^LABELS\s+gpu=h200,rack=r1,zone=east$`, res.stdout)

	// Removals written -key, which a flag parser would take for flags,
	// beside a global flag that takes a value.
	res = cliRun(ctx, env, "nodes", "label", nodes[0], "-zone", "--tenant", servertest.TenantA, "rack-", "gpu=h100")
	require.Equal(t, cli.ExitOK, res.code, res.stderr)
	require.Regexp(t, `(?m)^LABELS\s+gpu=h100$`, res.stdout)
	res = cliRun(ctx, env, "nodes", "label", nodes[1], "gpu=h200", "rack=r2", "--json")
	require.Equal(t, cli.ExitOK, res.code, res.stderr)
	var n struct{ Labels map[string]string }
	require.NoError(t, json.Unmarshal([]byte(res.stdout), &n), res.stdout)
	require.Equal(t, map[string]string{"gpu": "h200", "rack": "r2"}, n.Labels)

	res = cliRun(ctx, env, "nodes", "get", nodes[1])
	require.Equal(t, cli.ExitOK, res.code, res.stderr)
	require.Regexp(t, `(?m)^LABELS\s+gpu=h200,rack=r2$`, res.stdout)
	res = cliRun(ctx, env, "nodes", "list")
	require.Equal(t, cli.ExitOK, res.code, res.stderr)
	lines := strings.Split(strings.TrimSpace(res.stdout), "\n")
	require.Equal(t, "LABELS", strings.Fields(lines[0])[len(strings.Fields(lines[0]))-2])
	require.Regexp(t, `(?m)^`+servertest.NodeA1+`\s.*\s-\s+healthy$`, res.stdout, "a node without labels")
	require.Regexp(t, `(?m)^`+nodes[1]+`\s.*\sgpu=h200,rack=r2\s+healthy$`, res.stdout)

	res = cliRun(ctx, env, "nodes", "list", "--selector", "gpu in (h200,h100),rack!=r1")
	require.Equal(t, cli.ExitOK, res.code, res.stderr)
	lines = strings.Split(strings.TrimSpace(res.stdout), "\n")
	require.Len(t, lines, 3, res.stdout)
	require.True(t, strings.HasPrefix(lines[1], nodes[0]+" "), lines[1])
	require.True(t, strings.HasPrefix(lines[2], nodes[1]+" "), lines[2])
	res = cliRun(ctx, env, "nodes", "list", "--selector", "rack=r2", "--json")
	require.Equal(t, cli.ExitOK, res.code, res.stderr)
	var list struct{ Items []struct{ ID string } }
	require.NoError(t, json.Unmarshal([]byte(res.stdout), &list))
	require.Len(t, list.Items, 1)
	require.Equal(t, nodes[1], list.Items[0].ID)
	res = cliRun(ctx, env, "nodes", "list", "--selector", "rack in (r1")
	require.Equal(t, cli.ExitError, res.code)
	require.Contains(t, res.stderr, "INVALID_INPUT")

	res = cliRun(ctx, env, "nodes", "label", nodes[1], "zone=west", "--replace")
	require.Equal(t, cli.ExitOK, res.code, res.stderr)
	require.Regexp(t, `(?m)^LABELS\s+zone=west$`, res.stdout, "--replace makes the labels given the whole set")

	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{nodes[0], "-bad_key!"}, cli.ExitError, "INVALID_INPUT"},
		{[]string{nodes[0], "gpu=h 200"}, cli.ExitError, "INVALID_INPUT"},
		{[]string{nodes[0], "gpu"}, cli.ExitUsage, `argument "gpu": want key=value to set a label, -key or key- to remove one`},
		{[]string{nodes[0], "gpu=a", "gpu=b"}, cli.ExitUsage, `label "gpu" is given twice`},
		{[]string{"gpu=h200"}, cli.ExitUsage, "the first argument is the node id"},
		{[]string{nodes[0], "gpu=a", "--nope"}, cli.ExitUsage, "unknown flag: --nope"},
		{[]string{"node_nope", "gpu=a"}, cli.ExitError, "NOT_FOUND"},
	} {
		res := cliRun(ctx, env, append([]string{"nodes", "label"}, tc.args...)...)
		require.Equal(t, tc.code, res.code, "%v: %s", tc.args, res.stderr)
		require.Contains(t, res.stderr, tc.want, "%v", tc.args)
	}
	res = cliRun(ctx, envFor(r, servertest.TokRead), "nodes", "label", "--tenant", servertest.TenantA, nodes[0], "gpu=a")
	require.Equal(t, cli.ExitError, res.code)
	require.Contains(t, res.stderr, "PERMISSION_DENIED")

	res = cliRun(ctx, env, "nodes", "label", "--help")
	require.Equal(t, cli.ExitOK, res.code, res.stderr)
	require.Contains(t, res.stdout, "--replace")
	require.Contains(t, res.stdout, "-key (or key-, as kubectl writes it) removes one")
}
