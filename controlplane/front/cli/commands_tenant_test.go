package cli_test

import (
	"context"
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/controlplane/commands/queue"
	"github.com/better-compute/commands/controlplane/front/cli"
	"github.com/better-compute/commands/controlplane/server/servertest"
)

// "commands.list without nodeId: every command in the tenant the caller
// may read, filtered by kind, state, reason, run, batch, requester and a
// time range, newest first" and "commands.get by command id alone", from
// the CLI: the filters as flags, the old key=value forms beside them, and
// a REQUESTER column that says who asked and how.
func TestCommandsListAcrossTheTenantWithFilters(t *testing.T) {
	t.Parallel()
	r := servertest.Start(t, nil)
	env := envFor(r, servertest.TokOps)
	env["BC_TENANT"] = servertest.TenantA
	ctx := context.Background()
	nodes := addNodes(t, r, 1)
	run := func(node, kind string) queue.Command {
		res := cliRun(ctx, env, "commands", "run", "nodeId="+node, "kind="+kind, "--json")
		require.Equal(t, cli.ExitOK, res.code, res.stderr)
		var c struct{ ID string }
		require.NoError(t, json.Unmarshal([]byte(res.stdout), &c))
		return queue.Command{ID: c.ID, NodeID: node}
	}
	nvml := run(servertest.NodeA1, "diag.nvml")
	logs := run(nodes[0], "logs.collect")
	failed := run(nodes[0], "diag.nvml")
	settle(t, r, failed, queue.Failed, "ecc.uncorrectable")
	res := cliRun(ctx, envFor(r, servertest.TokOther), "commands", "run", "tenantId="+servertest.TenantB, "nodeId="+servertest.NodeB1, "kind=diag.nvml")
	require.Equal(t, cli.ExitOK, res.code, res.stderr)

	header := regexp.MustCompile(`^SEQ\s+ID\s+NODE\s+KIND\s+STATE\s+REASON\s+REQUESTER\s+CREATED\s+NOT AFTER\n`)
	res = cliRun(ctx, env, "commands", "list")
	require.Equal(t, cli.ExitOK, res.code, res.stderr)
	require.Regexp(t, header, res.stdout)
	lines := strings.Split(strings.TrimSpace(res.stdout), "\n")
	require.Len(t, lines, 4, "the tenant's three commands, not tenant b's: %s", res.stdout)
	for i, c := range []queue.Command{failed, logs, nvml} {
		require.Regexp(t, `^\d+\s+`+c.ID+`\s+`+c.NodeID+`\s`, lines[i+1], "newest first")
		require.Contains(t, lines[i+1], " ops (api) ")
	}
	require.Regexp(t, `\sdiag\.nvml\s+failed\s+ecc\.uncorrectable\s+ops \(api\)\s`, lines[1])

	for _, tc := range []struct {
		args []string
		want []queue.Command
	}{
		{[]string{"--node", nodes[0]}, []queue.Command{failed, logs}},
		{[]string{"nodeId=" + nodes[0]}, []queue.Command{failed, logs}},
		{[]string{"--kind", "diag.nvml"}, []queue.Command{failed, nvml}},
		{[]string{"--state", "failed", "--settled-since", "1h"}, []queue.Command{failed}},
		{[]string{"state=pending"}, []queue.Command{logs, nvml}},
		{[]string{"--reason", "ecc.uncorrectable"}, []queue.Command{failed}},
		{[]string{"--requester", "ops", "--since", "10m"}, []queue.Command{failed, logs, nvml}},
		{[]string{"--requester", "someone-else"}, nil},
		{[]string{"--since", time.Now().Add(time.Hour).UTC().Format(time.RFC3339)}, nil},
		{[]string{"--until", "1h"}, nil},
		{[]string{"--node", nodes[0], "--kind", "logs.collect"}, []queue.Command{logs}},
		{[]string{"--run", "run_01M90XACQ1EYCH0YJ0ZHK9MT6H"}, nil},
		{[]string{"--batch", "batch_01M90XACQ1EYCH0YJ0ZHK9MT6H"}, nil},
	} {
		res := cliRun(ctx, env, append([]string{"commands", "list", "--json"}, tc.args...)...)
		require.Equal(t, cli.ExitOK, res.code, "%v: %s", tc.args, res.stderr)
		var page struct{ Items []struct{ ID string } }
		require.NoError(t, json.Unmarshal([]byte(res.stdout), &page), "%v: %s", tc.args, res.stdout)
		var got, want []string
		for _, it := range page.Items {
			got = append(got, it.ID)
		}
		for _, c := range tc.want {
			want = append(want, c.ID)
		}
		require.Equal(t, want, got, "%v", tc.args)
	}

	res = cliRun(ctx, env, "commands", "list", "limit=1", "--all", "--json")
	require.Equal(t, cli.ExitOK, res.code, res.stderr)
	var page struct{ Items []map[string]any }
	require.NoError(t, json.Unmarshal([]byte(res.stdout), &page))
	require.Len(t, page.Items, 3, "--all follows the tenant's cursor")
	require.Equal(t, "ops", page.Items[0]["requester"])
	require.Equal(t, "api", page.Items[0]["requestedVia"])

	// By id alone, or with the node as before.
	for _, args := range [][]string{{failed.ID}, {failed.ID, "nodeId=" + nodes[0]}, {failed.ID, "--node", nodes[0]}} {
		res = cliRun(ctx, env, append([]string{"commands", "get"}, args...)...)
		require.Equal(t, cli.ExitOK, res.code, "%v: %s", args, res.stderr)
		require.Regexp(t, `(?m)^\d+\s+`+failed.ID+`\s+`+nodes[0]+`\s+diag\.nvml\s+failed\s+ecc\.uncorrectable\s+ops \(api\)\s`, res.stdout)
	}
	res = cliRun(ctx, env, "commands", "cancel", logs.ID, "--node", nodes[0])
	require.Equal(t, cli.ExitOK, res.code, res.stderr)
	require.Contains(t, res.stdout, "cancelled")

	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--since", "yesterday"}, cli.ExitUsage, `--since "yesterday": want a duration back from now (1h, 30m, 7d) or an RFC 3339 time`},
		{[]string{"--settled-since", "-1h"}, cli.ExitUsage, `--settled-since "-1h": a duration back from now must be more than 0`},
		{[]string{"--node", nodes[0], "nodeId=" + nodes[0]}, cli.ExitUsage, `field "nodeId" is set twice`},
		{[]string{"--state", "bogus"}, cli.ExitError, "INVALID_INPUT"},
		{[]string{"--run", "not an id"}, cli.ExitError, "runId"},
	} {
		res := cliRun(ctx, env, append([]string{"commands", "list"}, tc.args...)...)
		require.Equal(t, tc.code, res.code, "%v: %s", tc.args, res.stderr)
		require.Contains(t, res.stderr, tc.want, "%v", tc.args)
	}
	res = cliRun(ctx, env, "commands", "get", "cmd_nope")
	require.Equal(t, cli.ExitError, res.code)
	require.Contains(t, res.stderr, "NOT_FOUND")
}
