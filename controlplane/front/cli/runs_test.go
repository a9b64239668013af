package cli_test

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/controlplane/commands/queue"
	"github.com/better-compute/commands/controlplane/front/cli"
	"github.com/better-compute/commands/controlplane/server/servertest"
	"github.com/better-compute/commands/internal/testutil"
)

// "a run over a label selector with maxConcurrency 2 and maxErrors 1 where
// two nodes fail; the open count never exceeded 2; the run stopped with the
// rest not-started; the failures table names the nodes and reasons", as
// the CLI shows it: labels set with nodes label, runs create --wait with
// stderr not a terminal (one plain line per change), the failures table at
// the end, and exit 3.
func TestRunsCreateWaitStopsPastMaxErrorsAndPrintsTheFailures(t *testing.T) {
	t.Parallel()
	r := servertest.Start(t, nil)
	env := envFor(r, servertest.TokOps)
	env["BC_TENANT"] = servertest.TenantA
	ctx := context.Background()
	nodes := addNodes(t, r, 7)
	for _, n := range nodes[:6] {
		res := cliRun(ctx, env, "nodes", "label", n, "gpu=h200", "rack=r1")
		require.Equal(t, cli.ExitOK, res.code, res.stderr)
	}
	res := cliRun(ctx, env, "nodes", "label", nodes[6], "gpu=a100")
	require.Equal(t, cli.ExitOK, res.code, res.stderr)

	out, stderr, done := background(env, false, "runs", "create", "--kind", "diag.nvml", "--selector", "gpu=h200,rack in (r1,r2)",
		"--max-concurrency", "2", "--max-errors", "1", "--wait", "--poll", "200ms")
	runID := runIDFrom(t, stderr)
	// Ordered by id, two at a time settled together: node_f01 and f02
	// (f02 fails, one failure is within the limit), then f03 and f04 (f04
	// fails: two exceed it), and f05, f06 never start.
	most := driveRun(t, r, runID, map[string]bool{nodes[1]: true, nodes[3]: true})
	require.LessOrEqual(t, most, 2, "the open count never exceeds --max-concurrency")
	res = awaitResult(t, done)
	require.Equal(t, cli.ExitCommandFailed, res.code, "a run that ends failed exits 3: %s", res.stderr)
	require.Contains(t, res.stderr, "error: run "+runID+" ended failed (max-errors: 2 failure(s) exceed the error limit 1")

	// Not a terminal: one plain line per change, never a carriage return.
	require.NotContains(t, res.stderr, "\r")
	line := regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ  ` + runID + `  (running|stopping|failed)  succeeded \d, failures \d, started \d, waiting \d of 6`)
	var lines []string
	for _, l := range strings.Split(strings.TrimSpace(res.stderr), "\n") {
		if !strings.HasPrefix(l, "error: ") {
			lines = append(lines, l)
		}
	}
	require.GreaterOrEqual(t, len(lines), 2, res.stderr)
	for i, l := range lines {
		require.Regexp(t, line, l)
		if i > 0 {
			require.NotEqual(t, l[22:], lines[i-1][22:], "a line only when something changed")
		}
	}
	require.True(t, strings.HasSuffix(lines[len(lines)-1], "failed  succeeded 2, failures 2, started 0, waiting 0 of 6 (2 not started)"), lines[len(lines)-1])

	require.Equal(t, out.String(), res.stdout)
	require.Regexp(t, `(?m)^STATE\s+failed \(max-errors\)$`, res.stdout)
	require.Regexp(t, `(?m)^TARGETS\s+6 \(selector gpu=h200,rack in \(r1,r2\)\)$`, res.stdout)
	require.Regexp(t, `(?m)^LIMITS\s+concurrency 2 \(maxConcurrency 2\), errors 1 \(maxErrors 1\), notAfter 600s$`, res.stdout)
	require.Regexp(t, `(?m)^REQUESTER\s+ops \(api\)$`, res.stdout)
	require.Regexp(t, `(?m)^REASONS\s+check-failed=2, max-errors=2$`, res.stdout)
	require.Regexp(t, `(?m)^FAILURES \(2\)\nNODE\s+STATE\s+REASON\s+COMMAND\s+MESSAGE\n`, res.stdout)
	for _, n := range []string{nodes[1], nodes[3]} {
		require.Regexp(t, `(?m)^`+n+`\s+failed\s+check-failed\s+cmd_\S+\s+ecc: 3 uncorrectable errors on GPU-1$`, res.stdout)
	}
	require.NotRegexp(t, `(?m)^`+nodes[0]+`\s`, res.stdout, "a node that succeeded is not a failure")
	require.NotContains(t, res.stdout, "REFUSED")

	// The rest are listed not-started, with the reason.
	res = cliRun(ctx, env, "runs", "targets", runID, "--state", "not-started")
	require.Equal(t, cli.ExitOK, res.code, res.stderr)
	require.Regexp(t, `(?m)^#\s+NODE\s+POOL\s+STATE\s+COMMAND\s+REASON\s+STARTED\s+SETTLED\s+MESSAGE$`, res.stdout)
	require.Regexp(t, `(?m)^4\s+`+nodes[4]+`\s+default\s+not-started\s+-\s+max-errors\s`, res.stdout)
	require.Regexp(t, `(?m)^5\s+`+nodes[5]+`\s+default\s+not-started\s+-\s+max-errors\s`, res.stdout)

	// runs get --wait on an ended run returns at once, with the same exit.
	res = cliRun(ctx, env, "runs", "get", runID, "--wait", "--json")
	require.Equal(t, cli.ExitCommandFailed, res.code, res.stderr)
	var run struct {
		State  string
		Counts struct {
			Targets, Succeeded, Failures, NotStarted int
			ByReason                                 map[string]int
		}
	}
	require.NoError(t, json.Unmarshal([]byte(res.stdout), &run), res.stdout)
	require.Equal(t, "failed", run.State)
	require.Equal(t, 6, run.Counts.Targets)
	require.Equal(t, 2, run.Counts.Failures)
	require.Equal(t, 2, run.Counts.NotStarted)
}

// On a terminal --wait draws a bar that redraws itself in place, says
// what the run waits for, and ends on a fresh line; a run that succeeded
// exits 0 and its table has no failures.
func TestRunsWaitDrawsABarOnATerminal(t *testing.T) {
	t.Parallel()
	r := servertest.Start(t, nil)
	env := envFor(r, servertest.TokOps)
	env["BC_TENANT"] = servertest.TenantA
	nodes := addNodes(t, r, 3)
	out, stderr, done := background(env, true, "runs", "create", "--kind", "inventory.refresh", "--nodes", strings.Join(nodes, ","),
		"--max-concurrency", "1", "--payload", `{"sections":["gpus"]}`, "--wait", "--poll", "200ms")
	runID := runIDFrom(t, stderr)
	// Node by node: each settles once the bar shows it started.
	for i := range nodes {
		shown := fmt.Sprintf("succeeded %d, failures 0, started 1, waiting %d of 3", i, 2-i)
		testutil.WaitFor(t, 20*time.Second, "the bar to show "+shown, func() bool { return strings.Contains(stderr.String(), shown) })
		open := openCommands(t, r, runID)
		require.Len(t, open, 1, "--max-concurrency 1")
		settle(t, r, open[0], queue.Succeeded, "")
	}
	res := awaitResult(t, done)
	require.Equal(t, cli.ExitOK, res.code, res.stderr)
	require.Equal(t, out.String(), res.stdout)
	require.True(t, strings.HasPrefix(res.stderr, "following run "+runID+" (Ctrl-C stops following; the run goes on)\n\r"), res.stderr)
	require.Equal(t, 2, strings.Count(res.stderr, "\n"), "redrawn in place, not a line each: %q", res.stderr)
	require.Regexp(t, `\r\x1b\[K\[-{24}\] running  succeeded 0, failures 0, started 1, waiting 2 of 3\r`, res.stderr)
	require.Regexp(t, `\r\x1b\[K\[#{8}-{16}\] running  succeeded 1, failures 0, started 1, waiting 1 of 3\r`, res.stderr, "one third done")
	require.True(t, strings.HasSuffix(res.stderr, "\r\x1b[K["+strings.Repeat("#", 24)+"] succeeded  succeeded 3, failures 0, started 0, waiting 0 of 3\n"),
		"a full bar, then a fresh line: %q", res.stderr)
	require.Regexp(t, `(?m)^STATE\s+succeeded$`, res.stdout)
	require.Regexp(t, `(?m)^TARGETS\s+3 \(nodes node_f01,node_f02,node_f03\)$`, res.stdout)
	require.NotContains(t, res.stdout, "FAILURES")

	// The run's commands carry it: commands list --run shows who asked, and how.
	res = cliRun(context.Background(), env, "commands", "list", "--run", runID)
	require.Equal(t, cli.ExitOK, res.code, res.stderr)
	lines := strings.Split(strings.TrimSpace(res.stdout), "\n")
	require.Len(t, lines, 4, res.stdout)
	for _, l := range lines[1:] {
		require.Contains(t, l, "ops (fleet-run "+runID+")")
		require.Regexp(t, `\snode_f0[123]\s+inventory\.refresh\s+succeeded\s`, l)
	}
}

// Bad input gets the server's clear error (exit 1) or, for what the CLI
// cannot send, a usage error (exit 2); another tenant's run is NOT_FOUND.
func TestRunsBadInput(t *testing.T) {
	t.Parallel()
	r := servertest.Start(t, nil)
	env := envFor(r, servertest.TokOps)
	env["BC_TENANT"] = servertest.TenantA
	ctx := context.Background()
	create := func(args ...string) result {
		return cliRun(ctx, env, append([]string{"runs", "create", "--kind", "diag.nvml"}, args...)...)
	}
	for _, tc := range []struct {
		args []string
		code int
		want []string
	}{
		{[]string{"--all", "--max-concurrency", "0"}, cli.ExitError, []string{"INVALID_INPUT", "maxConcurrency 0 would start nothing"}},
		{[]string{"--all", "--max-concurrency", "101%"}, cli.ExitError, []string{"INVALID_INPUT", `maxConcurrency "101%": a percentage must be 0% to 100%`}},
		{[]string{"--all", "--max-errors", "-1"}, cli.ExitError, []string{"INVALID_INPUT", "maxErrors -1 must not be negative"}},
		{[]string{}, cli.ExitError, []string{"INVALID_INPUT", "targets select no node"}},
		{[]string{"--selector", "gpu in (h200"}, cli.ExitError, []string{"INVALID_INPUT", "selector"}},
		{[]string{"--selector", "nosuchkey=1"}, cli.ExitError, []string{"INVALID_INPUT", "nosuchkey"}},
		{[]string{"--pool", "nope"}, cli.ExitError, []string{"INVALID_INPUT", "pool nope"}},
		{[]string{"--all", "--node", servertest.NodeA1}, cli.ExitError, []string{"INVALID_INPUT", "targets.all selects every node and takes no other criterion"}},
		{[]string{"--all", "--payload", "not json"}, cli.ExitUsage, []string{`--payload "not json" is not a JSON object`}},
		{[]string{"--all", "--not-after", "1500ms"}, cli.ExitUsage, []string{"--not-after 1.5s: want a positive whole number of seconds"}},
		{[]string{"--all", "--max-concurency", "1"}, cli.ExitUsage, []string{"unknown flag: --max-concurency"}},
	} {
		res := create(tc.args...)
		require.Equal(t, tc.code, res.code, "%v: %s", tc.args, res.stderr)
		for _, w := range tc.want {
			require.Contains(t, res.stderr, w, "%v", tc.args)
		}
		require.Empty(t, res.stdout, "%v", tc.args)
	}
	res := cliRun(ctx, env, "runs", "create", "--all")
	require.Equal(t, cli.ExitUsage, res.code)
	require.Contains(t, res.stderr, "--kind is required")
	res = cliRun(ctx, envFor(r, servertest.TokOps), "runs", "create", "--kind", "diag.nvml", "--all")
	require.Equal(t, cli.ExitUsage, res.code)
	require.Contains(t, res.stderr, "no tenant: give --tenant")

	// A run of tenant a, asked for by tenant b's identity.
	res = create("--node", servertest.NodeA1, "--json")
	require.Equal(t, cli.ExitOK, res.code, res.stderr)
	runID := runIDPattern.FindString(res.stdout)
	require.NotEmpty(t, runID)
	other := envFor(r, servertest.TokOther)
	other["BC_TENANT"] = servertest.TenantB
	res = cliRun(ctx, other, "runs", "get", runID)
	require.Equal(t, cli.ExitError, res.code)
	require.Contains(t, res.stderr, "NOT_FOUND")
	res = cliRun(ctx, other, "runs", "get", runID, "tenantId="+servertest.TenantA)
	require.Equal(t, cli.ExitError, res.code)
	require.Contains(t, res.stderr, "NOT_FOUND")
	// Interrupted (Ctrl-C cancels Main's context), --wait stops following
	// and says the run goes on.
	wctx, stop := context.WithCancel(ctx)
	var wout, werr safeBuffer
	waited := make(chan int, 1)
	go func() {
		waited <- cli.Main(wctx, cli.Env{Args: []string{"runs", "get", runID, "--wait"}, Stdout: &wout, Stderr: &werr,
			Getenv: func(k string) string { return env[k] }})
	}()
	testutil.WaitFor(t, 20*time.Second, "--wait to follow the run", func() bool { return strings.Contains(werr.String(), runID+"  running") })
	stop()
	select {
	case code := <-waited:
		require.Equal(t, cli.ExitError, code)
	case <-time.After(20 * time.Second):
		t.Fatal("--wait did not stop when its context ended")
	}
	require.Contains(t, werr.String(), "(the run goes on: better-compute runs get "+runID+" --wait)")
	require.Empty(t, wout.String())

	res = cliRun(ctx, env, "runs", "targets", runID, "--state", "bogus")
	require.Equal(t, cli.ExitError, res.code)
	require.Contains(t, res.stderr, `state "bogus" is not a target state`)
}

// pause, resume and cancel print the run as it is after; get says what a
// paused run waits for; list and targets print tables, and JSON with
// --json; a retry with the idempotency key returns the same run.
func TestRunsPauseResumeCancelListTargets(t *testing.T) {
	t.Parallel()
	r := servertest.Start(t, nil)
	env := envFor(r, servertest.TokOps)
	env["BC_TENANT"] = servertest.TenantA
	ctx := context.Background()
	nodes := addNodes(t, r, 3)
	args := []string{"runs", "create", "--kind", "logs.collect", "--node", nodes[0], "--node", nodes[1], "--nodes", nodes[2],
		"--max-concurrency", "1", "--idempotency-key", "logs-0412", "--not-after", "15m", "--reason", "collect the logs"}
	res := cliRun(ctx, env, args...)
	require.Equal(t, cli.ExitOK, res.code, res.stderr)
	runID := runIDPattern.FindString(res.stdout)
	require.Regexp(t, `(?m)^RUN\s+`+runID+`$`, res.stdout)
	require.Regexp(t, `(?m)^KIND\s+logs\.collect$`, res.stdout)
	require.Regexp(t, `(?m)^REASON\s+collect the logs$`, res.stdout)
	require.Regexp(t, `(?m)^LIMITS\s+concurrency 1 \(maxConcurrency 1\), errors 0 \(maxErrors 0\), notAfter 900s$`, res.stdout)
	again := cliRun(ctx, env, append(args, "--json")...)
	require.Equal(t, cli.ExitOK, again.code, again.stderr)
	require.Contains(t, again.stdout, `"id": "`+runID+`"`, "a retry with the key returns the same run")

	testutil.WaitFor(t, 20*time.Second, "the first node to start", func() bool { return len(openCommands(t, r, runID)) == 1 })
	res = cliRun(ctx, env, "runs", "pause", runID)
	require.Equal(t, cli.ExitOK, res.code, res.stderr)
	require.Regexp(t, `(?m)^STATE\s+paused$`, res.stdout)
	testutil.WaitFor(t, 20*time.Second, "the run to say it waits for its resume", func() bool {
		res = cliRun(ctx, env, "runs", "get", runID)
		require.Equal(t, cli.ExitOK, res.code, res.stderr)
		return strings.Contains(res.stdout, "WAITING FOR")
	})
	require.Contains(t, res.stdout, "paused: the run is paused: better-compute runs resume "+runID+" lets it start nodes again")
	require.Regexp(t, `(?m)^PROGRESS\s+paused  succeeded 0, failures 0, started 1, waiting 2 of 3; waiting: paused`, res.stdout)

	res = cliRun(ctx, env, "runs", "resume", runID)
	require.Equal(t, cli.ExitOK, res.code, res.stderr)
	require.Regexp(t, `(?m)^STATE\s+running$`, res.stdout)

	res = cliRun(ctx, env, "runs", "list")
	require.Equal(t, cli.ExitOK, res.code, res.stderr)
	require.Regexp(t, `^RUN\s+KIND\s+STATE\s+TARGETS\s+SUCCEEDED\s+FAILURES\s+STARTED\s+WAITING\s+REQUESTER\s+CREATED\n`, res.stdout)
	require.Regexp(t, `(?m)^`+runID+`\s+logs\.collect\s+running\s+3\s+0\s+0\s+1\s+2\s+ops \(api\)\s`, res.stdout)
	res = cliRun(ctx, env, "runs", "list", "--state", "active", "--json")
	require.Equal(t, cli.ExitOK, res.code, res.stderr)
	var list struct{ Items []struct{ ID, State string } }
	require.NoError(t, json.Unmarshal([]byte(res.stdout), &list))
	require.Len(t, list.Items, 1)
	require.Equal(t, runID, list.Items[0].ID)

	res = cliRun(ctx, env, "runs", "targets", runID)
	require.Equal(t, cli.ExitOK, res.code, res.stderr)
	require.Regexp(t, `(?m)^0\s+`+nodes[0]+`\s+default\s+started \(pending\)\s+cmd_\S+\s+-\s+\S+Z\s+-\s+-$`, res.stdout)
	require.Regexp(t, `(?m)^2\s+`+nodes[2]+`\s+default\s+waiting\s+-\s+-\s+-\s+-\s+-$`, res.stdout)
	res = cliRun(ctx, env, "runs", "targets", runID, "limit=1", "--all", "--json")
	require.Equal(t, cli.ExitOK, res.code, res.stderr)
	var targets struct {
		Items []struct{ NodeID, State string }
	}
	require.NoError(t, json.Unmarshal([]byte(res.stdout), &targets))
	require.Len(t, targets.Items, 3, "--all follows the cursor")

	res = cliRun(ctx, env, "runs", "cancel", runID)
	require.Equal(t, cli.ExitOK, res.code, res.stderr)
	require.Regexp(t, `(?m)^STATE\s+(cancelling|cancelled) \(cancelled\)$`, res.stdout)
	require.Regexp(t, `(?m)^MESSAGE\s+cancelled by ops`, res.stdout)
	res = cliRun(ctx, env, "runs", "get", runID, "--wait", "--poll", "200ms")
	require.Equal(t, cli.ExitCommandFailed, res.code, "a cancelled run exits 3: %s", res.stderr)
	require.Regexp(t, `(?m)^STATE\s+cancelled \(cancelled\)$`, res.stdout)
	require.Contains(t, res.stderr, "error: run "+runID+" ended cancelled (cancelled: cancelled by ops)")

	res = cliRun(ctx, env, "runs", "pause", runID)
	require.Equal(t, cli.ExitError, res.code)
	require.Contains(t, res.stderr, "INVALID_STATE")
	require.Contains(t, res.stderr, "it cannot be paused")
}

// A node the caller may not run the kind on is listed as refused, with
// the reason, never dropped: the run's table ends with the refused
// targets.
func TestRunsListRefusedTargets(t *testing.T) {
	t.Parallel()
	r := servertest.Start(t, nil)
	env := envFor(r, servertest.TokOps)
	env["BC_TENANT"] = servertest.TenantA
	ctx := context.Background()
	res := cliRun(ctx, envFor(r, servertest.TokAdmin), "api", "nodes.create", "tenantId="+servertest.TenantA, "nodeId=node_disc", "role=discovery")
	require.Equal(t, cli.ExitOK, res.code, res.stderr)
	res = cliRun(ctx, env, "runs", "create", "--kind", "logs.collect", "--all")
	require.Equal(t, cli.ExitOK, res.code, res.stderr)
	require.Regexp(t, `(?m)^TARGETS\s+2 \(all nodes\)$`, res.stdout)
	require.Contains(t, res.stdout, "(1 refused)")
	require.Regexp(t, `(?m)^REFUSED \(1\)\nNODE\s+REASON\s+MESSAGE\nnode_disc\s+role-mismatch\s+node node_disc runs role discovery; logs\.collect runs on node$`, res.stdout)
}
