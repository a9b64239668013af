package cli_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/controlplane/front/cli"
	"github.com/better-compute/commands/controlplane/server"
	"github.com/better-compute/commands/controlplane/server/serverconfig"
	"github.com/better-compute/commands/controlplane/server/servertest"
	"github.com/better-compute/commands/internal/testutil"
	"github.com/better-compute/commands/internal/trust"
)

// guideCommands returns the commands of the first sh block after heading
// in the operator guide: comment lines dropped, a line ending in \ joined
// to the next.
func guideCommands(t *testing.T, heading string) []string {
	t.Helper()
	var out []string
	cont := false
	for _, l := range shBlock(t, filepath.Join(testutil.RepoRoot(t), "docs", "operator-guide.md"), heading) {
		switch {
		case strings.HasPrefix(l, "#"):
			continue
		case cont:
			out[len(out)-1] += " " + l
		default:
			out = append(out, l)
		}
		cont = strings.HasSuffix(l, "\\")
		if cont {
			out[len(out)-1] = strings.TrimSpace(strings.TrimSuffix(out[len(out)-1], "\\"))
		}
	}
	return out
}

// guideShell runs the guide's lines as an operator types them: bash, with
// better-compute the built binary on PATH, against r.
type guideShell struct {
	r    *servertest.Running
	path string
}

func newGuideShell(t *testing.T, r *servertest.Running) *guideShell {
	t.Helper()
	bin := testutil.BuildBinary(t, "./controlplane/cmd/better-compute")
	dir := t.TempDir()
	require.NoError(t, os.Symlink(bin, filepath.Join(dir, "better-compute")))
	return &guideShell{r: r, path: dir + ":/usr/local/bin:/usr/bin:/bin"}
}

// command is line under bash as the identity of token, with HOME home.
func (g *guideShell) command(ctx context.Context, line, token, home string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, "bash", "-o", "pipefail", "-ec", line)
	cmd.Env = []string{"PATH=" + g.path, "HOME=" + home, "BC_ENDPOINT=http://" + g.r.GRPC, "BC_TOKEN=" + token,
		"BC_TENANT=" + servertest.TenantA, "TENANT=" + servertest.TenantA}
	return cmd
}

// run runs line to its end and returns its exit code and output.
func (g *guideShell) run(t *testing.T, line, token, home string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out, errb safeBuffer
	cmd := g.command(ctx, line, token, home)
	cmd.Stdout, cmd.Stderr = &out, &errb
	return result{code: exitCode(t, cmd.Run()), stdout: out.String(), stderr: errb.String()}
}

// start runs line in the background.
func (g *guideShell) start(t *testing.T, line, token, home string) (*safeBuffer, <-chan result) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	var out, errb safeBuffer
	cmd := g.command(ctx, line, token, home)
	cmd.Stdout, cmd.Stderr = &out, &errb
	require.NoError(t, cmd.Start())
	done := make(chan result, 1)
	go func() {
		defer cancel()
		err := cmd.Wait()
		code := 0
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code = ee.ExitCode()
		} else if err != nil {
			code = -1
		}
		done <- result{code: code, stdout: out.String(), stderr: errb.String()}
	}()
	return &errb, done
}

func exitCode(t *testing.T, err error) int {
	t.Helper()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	require.NoError(t, err)
	return 0
}

// The operator guide's fleet-run procedures (section 12), run as written
// with the guide's placeholders the test's nodes and runs: label the nodes
// and check the selector; a run over it with a concurrency and an error
// limit, followed with --wait while the test plays the nodes (two fail);
// what failed in the last hour; watching another run; pausing, resuming
// and cancelling a third.
func TestOperatorGuideFleetRunProceduresRunAsWritten(t *testing.T) {
	t.Parallel()
	r := servertest.Start(t, nil)
	g := newGuideShell(t, r)
	home := t.TempDir()
	env := envFor(r, servertest.TokOps)
	env["BC_TENANT"] = servertest.TenantA
	nodes := addNodes(t, r, 7)

	label := guideCommands(t, "### Labelling nodes")
	require.Len(t, label, 2)
	for _, n := range nodes[:6] {
		res := g.run(t, strings.ReplaceAll(label[0], "node_…", n), servertest.TokOps, home)
		require.Equal(t, 0, res.code, "%s: %s", label[0], res.stderr)
	}
	res := cliRun(context.Background(), env, "nodes", "label", nodes[6], "gpu=h200", "rack=r9")
	require.Equal(t, cli.ExitOK, res.code, res.stderr)
	res = g.run(t, label[1], servertest.TokOps, home)
	require.Equal(t, 0, res.code, "%s: %s", label[1], res.stderr)
	listed := strings.Split(strings.TrimSpace(res.stdout), "\n")[1:]
	require.Len(t, listed, 6, "the selector keeps the six nodes in r1: %s", res.stdout)
	for i, l := range listed {
		require.True(t, strings.HasPrefix(l, nodes[i]+" "), l)
	}

	create := guideCommands(t, "### Running a kind over a selector, within limits")
	require.Len(t, create, 1)
	stderr, done := g.start(t, create[0], servertest.TokOps, home)
	runID := runIDFrom(t, stderr)
	most := driveRun(t, r, runID, map[string]bool{nodes[1]: true, nodes[3]: true})
	require.LessOrEqual(t, most, 2)
	res = awaitResult(t, done)
	require.Equal(t, cli.ExitCommandFailed, res.code, "the guide: it exits 3 when the run ended failed: %s", res.stderr)
	require.Regexp(t, `(?m)^\S+Z  `+runID+`  failed  succeeded 2, failures 2, started 0, waiting 0 of 6 \(2 not started\)$`, res.stderr,
		"the guide's last line, as it shows it")
	require.Regexp(t, `(?m)^FAILURES \(2\)$`, res.stdout)
	require.Regexp(t, `(?m)^`+nodes[1]+`\s+failed\s+check-failed\s`, res.stdout)
	require.Regexp(t, `(?m)^`+nodes[3]+`\s+failed\s+check-failed\s`, res.stdout)
	again := g.run(t, create[0], servertest.TokOps, home)
	require.Equal(t, cli.ExitCommandFailed, again.code)
	require.Regexp(t, `(?m)^RUN\s+`+runID+`$`, again.stdout, "the same key returns the same run")

	failed := guideCommands(t, "### What failed in the last hour")
	require.Len(t, failed, 2)
	for _, l := range failed {
		res = g.run(t, strings.ReplaceAll(l, "run_…", runID), servertest.TokOps, home)
		require.Equal(t, 0, res.code, "%s: %s", l, res.stderr)
		rows := strings.Split(strings.TrimSpace(res.stdout), "\n")[1:]
		require.Len(t, rows, 2, "%s: %s", l, res.stdout)
		for i, n := range []string{nodes[3], nodes[1]} {
			require.Regexp(t, `\s`+n+`\s+diag\.nvml\s+failed\s+check-failed\s+ops \(fleet-run `+runID+`\)\s`, rows[i], "newest first")
		}
	}

	// Watching: another run, followed from "another terminal".
	res = cliRun(context.Background(), env, "runs", "create", "--kind", "inventory.refresh", "--selector", "rack=r1", "--max-concurrency", "3", "--max-errors", "1")
	require.Equal(t, cli.ExitOK, res.code, res.stderr)
	second := runIDPattern.FindString(res.stdout)
	watch := guideCommands(t, "### Watching a run")
	require.Len(t, watch, 3)
	res = g.run(t, watch[0], servertest.TokOps, home)
	require.Equal(t, 0, res.code, res.stderr)
	require.Regexp(t, `(?m)^`+second+`\s+inventory\.refresh\s+running\s+6\s`, res.stdout)
	require.NotContains(t, res.stdout, runID, "an ended run is not active")
	stderr, done = g.start(t, strings.ReplaceAll(watch[1], "run_…", second), servertest.TokOps, home)
	testutil.WaitFor(t, 20*time.Second, "runs get --wait to follow", func() bool { return strings.Contains(stderr.String(), second) })
	driveRun(t, r, second, map[string]bool{nodes[5]: true})
	res = awaitResult(t, done)
	require.Equal(t, cli.ExitCommandFailed, res.code, res.stderr)
	require.Regexp(t, `(?m)^STATE\s+failed \(node-failures\)$`, res.stdout, "one failure, within no limit: every node ran")
	res = g.run(t, strings.ReplaceAll(watch[2], "run_…", second), servertest.TokOps, home)
	require.Equal(t, 0, res.code, res.stderr)
	require.Regexp(t, `(?m)^5\s+`+nodes[5]+`\s+default\s+failed\s+cmd_\S+\s+check-failed\s`, res.stdout)
	require.Len(t, strings.Split(strings.TrimSpace(res.stdout), "\n"), 2)

	// Pausing, resuming and cancelling a third.
	res = cliRun(context.Background(), env, "runs", "create", "--kind", "logs.collect", "--selector", "gpu=h200", "--max-concurrency", "1")
	require.Equal(t, cli.ExitOK, res.code, res.stderr)
	third := runIDPattern.FindString(res.stdout)
	control := guideCommands(t, "### Pausing, resuming and cancelling a run")
	require.Len(t, control, 3)
	for i, want := range []string{`paused`, `running`, `(cancelling|cancelled) \(cancelled\)`} {
		res = g.run(t, strings.ReplaceAll(control[i], "run_…", third), servertest.TokOps, home)
		require.Equal(t, 0, res.code, "%s: %s", control[i], res.stderr)
		require.Regexp(t, `(?m)^STATE\s+`+want+`$`, res.stdout, control[i])
	}
	testutil.WaitFor(t, 20*time.Second, "the cancelled run to end", func() bool { return runFinished(t, r, third) })
	require.Empty(t, openCommands(t, r, third), "its pending command was cancelled")
}

// approvers writes Ed25519 approver keys: the server's config for their
// public halves, and each private key's path.
func approvers(t *testing.T, names ...string) ([]serverconfig.ApproverConfig, map[string]string) {
	t.Helper()
	dir := t.TempDir()
	var cfg []serverconfig.ApproverConfig
	keys := map[string]string{}
	for _, name := range names {
		pub, priv, err := trust.NewEd25519()
		require.NoError(t, err)
		pp, err := trust.MarshalPublicKeyPEM(pub)
		require.NoError(t, err)
		kp, err := trust.MarshalPrivateKeyPEM(priv)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(dir, name+".pub"), pp, 0o644))
		require.NoError(t, os.WriteFile(filepath.Join(dir, name+".pem"), kp, 0o600))
		cfg = append(cfg, serverconfig.ApproverConfig{Name: name, PublicKey: filepath.Join(dir, name+".pub")})
		keys[name] = filepath.Join(dir, name+".pem")
	}
	return cfg, keys
}

// The guide's destructive run under a 2-of-3 quorum, as written: ops
// creates a node.reboot run over a selector; it waits for approval, and
// ops cannot approve it; two approvers (another identity, each with their
// own key at the guide's path in their own home) approve it once for every
// node; runs get --wait follows it while the test plays the nodes, which
// reboot one at a time, as the default pool's budget allows, and the run
// says it waits for the budget.
func TestOperatorGuideDestructiveFleetRunUnderTheQuorum(t *testing.T) {
	t.Parallel()
	cfg, keys := approvers(t, "alice", "bob", "carol")
	signing, _ := servertest.Signing(t)
	r := servertest.Start(t, func(c *server.Config) {
		signing(c)
		c.PKI.Approvers, c.PKI.ApprovalThreshold = cfg, 2
	})
	g := newGuideShell(t, r)
	env := envFor(r, servertest.TokOps)
	env["BC_TENANT"] = servertest.TenantA
	nodes := addNodes(t, r, 3)
	for _, n := range nodes {
		res := cliRun(context.Background(), env, "nodes", "label", n, "gpu=h200")
		require.Equal(t, cli.ExitOK, res.code, res.stderr)
	}
	lines := guideCommands(t, "### A destructive run under the batch quorum")
	require.Len(t, lines, 3)

	res := g.run(t, lines[0], servertest.TokOps, t.TempDir())
	require.Equal(t, 0, res.code, "%s: %s", lines[0], res.stderr)
	runID := runIDPattern.FindString(res.stdout)
	batch := regexp.MustCompile(`(?m)^BATCH\s+(batch_\S+) `).FindStringSubmatch(res.stdout)
	require.NotNil(t, batch, res.stdout)
	testutil.WaitFor(t, 20*time.Second, "the run to say it awaits approval", func() bool {
		res = cliRun(context.Background(), env, "runs", "get", runID)
		return strings.Contains(res.stdout, "WAITING FOR  awaiting-approval: batch "+batch[1]+" awaits 2 more approval(s)")
	})
	require.Empty(t, openCommands(t, r, runID), "nothing starts before the quorum")

	approve := strings.ReplaceAll(lines[1], "batch_…", batch[1])
	homes := map[string]string{}
	for _, name := range []string{"alice", "bob"} {
		homes[name] = t.TempDir()
		dir := filepath.Join(homes[name], ".config", "better-compute")
		require.NoError(t, os.MkdirAll(dir, 0o700))
		b, err := os.ReadFile(keys[name])
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(dir, "approver.pem"), b, 0o600))
	}
	res = g.run(t, approve, servertest.TokOps, homes["alice"])
	require.Equal(t, 1, res.code, "the run's requester cannot approve its batch")
	require.Contains(t, res.stderr, "requester-cannot-approve")
	res = g.run(t, approve, servertest.TokAdmin, homes["alice"])
	require.Equal(t, 0, res.code, res.stderr)
	require.Contains(t, res.stdout, "1 more approval(s) needed for batch "+batch[1])
	require.Regexp(t, `(?m)^\s+`+nodes[0]+`\s+node\.reboot\s`, res.stdout, "the approver reads every target's leaf")
	require.Regexp(t, `(?m)^\s+`+nodes[2]+`\s+node\.reboot\s`, res.stdout)

	stderr, done := g.start(t, strings.ReplaceAll(lines[2], "run_…", runID), servertest.TokOps, t.TempDir())
	testutil.WaitFor(t, 20*time.Second, "runs get --wait to show the approval wait", func() bool {
		return strings.Contains(stderr.String(), "waiting: awaiting-approval: batch "+batch[1]+" awaits 1 more approval(s)")
	})
	res = g.run(t, approve, servertest.TokAdmin, homes["bob"])
	require.Equal(t, 0, res.code, res.stderr)
	require.Contains(t, res.stdout, "batch "+batch[1]+" is approved")
	testutil.WaitFor(t, 20*time.Second, "the run to wait for the pool's budget", func() bool {
		return strings.Contains(stderr.String(), "started 1, waiting 2 of 3; waiting: budget-concurrent: node "+nodes[1]+" waits")
	})
	most := driveRun(t, r, runID, nil)
	require.Equal(t, 1, most, "--max-concurrency 2, but the default pool's maxConcurrent is 1")
	res = awaitResult(t, done)
	require.Equal(t, 0, res.code, res.stderr)
	require.Regexp(t, `(?m)^STATE\s+succeeded$`, res.stdout)
	require.Regexp(t, `(?m)^BATCH\s+`+batch[1]+` `, res.stdout)
	require.Regexp(t, `(?m)^REASON\s+Kernel 6\.8\.12 on the h200 nodes$`, res.stdout)
}
