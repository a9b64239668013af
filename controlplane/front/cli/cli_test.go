package cli_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/controlplane/commands/queue"
	"github.com/better-compute/commands/controlplane/front/cli"
	"github.com/better-compute/commands/controlplane/server/servertest"
	"github.com/better-compute/commands/internal/testutil"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testutil.CleanupBuilds()
	os.Exit(code)
}

type result struct {
	code           int
	stdout, stderr string
}

// safeBuffer lets a test read what a CLI still running has written.
type safeBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *safeBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *safeBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// cliRun runs the CLI's Main in process with env as its whole environment.
func cliRun(ctx context.Context, env map[string]string, args ...string) result {
	var out, errb safeBuffer
	code := cli.Main(ctx, cli.Env{Args: args, Stdout: &out, Stderr: &errb, Getenv: func(k string) string { return env[k] }})
	return result{code: code, stdout: out.String(), stderr: errb.String()}
}

func envFor(r *servertest.Running, token string) map[string]string {
	return map[string]string{"BC_ENDPOINT": "http://" + r.GRPC, "BC_TOKEN": token}
}

// "better-compute api commands.run tenantId=$TENANT nodeId=node_… kind=node.reboot idempotencyKey=reboot-0412"
func TestAPICommandsRunInTheSpecsForm(t *testing.T) {
	t.Parallel()
	r := servertest.Start(t, nil)
	env := envFor(r, servertest.TokOps)
	args := []string{"api", "commands.run", "tenantId=" + servertest.TenantA, "nodeId=" + servertest.NodeA1, "kind=node.reboot", "idempotencyKey=reboot-0412"}
	res := cliRun(context.Background(), env, args...)
	require.Equal(t, cli.ExitOK, res.code, res.stderr)
	var cmd map[string]any
	require.NoError(t, json.Unmarshal([]byte(res.stdout), &cmd), res.stdout)
	require.True(t, strings.HasPrefix(cmd["id"].(string), "cmd_"))
	require.Equal(t, "pending", cmd["state"])
	require.Equal(t, "node.reboot", cmd["kind"])
	require.Contains(t, cmd, "notAfter")
	require.Equal(t, false, cmd["retrySafe"])

	again := cliRun(context.Background(), env, args...)
	require.Equal(t, cli.ExitOK, again.code, again.stderr)
	var cmd2 map[string]any
	require.NoError(t, json.Unmarshal([]byte(again.stdout), &cmd2))
	require.Equal(t, cmd["id"], cmd2["id"], "a retry returns the command already queued")

	// A payload as JSON and as dotted keys.
	res = cliRun(context.Background(), env, "api", "commands.run", "tenantId="+servertest.TenantA, "nodeId="+servertest.NodeA1,
		"kind=inventory.refresh", `payload={"sections":["gpus"]}`, "payload.rescan=true", "notAfterSeconds=300")
	require.Equal(t, cli.ExitOK, res.code, res.stderr)
	require.Contains(t, res.stdout, `"rescan": true`)
}

func TestAPIErrors(t *testing.T) {
	t.Parallel()
	r := servertest.Start(t, nil)
	env := envFor(r, servertest.TokOps)
	ctx := context.Background()

	res := cliRun(ctx, env, "api", "commands.start")
	require.Equal(t, cli.ExitUsage, res.code)
	require.Contains(t, res.stderr, "commands.cancel, commands.get, commands.list, commands.run, events.watch")

	res = cliRun(ctx, env, "api", "commands.run", "node=node_a1")
	require.Equal(t, cli.ExitUsage, res.code)
	require.Contains(t, res.stderr, `unknown field "node"`)
	require.Contains(t, res.stderr, "valid fields: tenantId, nodeId, kind, payload, idempotencyKey, notAfterSeconds, batchId")

	res = cliRun(ctx, env, "api", "commands.run", "tenantId=tenant_a", "nodeId=node_a1", "kind=gpu.reset")
	require.Equal(t, cli.ExitError, res.code)
	require.Contains(t, res.stderr, "UNSUPPORTED")
	require.Contains(t, res.stderr, "kind=gpu.reset")

	res = cliRun(ctx, env, "api", "commands.run", "tenantId=tenant_a", "nodeId=node_b1", "kind=diag.nvml")
	require.Equal(t, cli.ExitError, res.code)
	require.Contains(t, res.stderr, "NOT_FOUND")

	res = cliRun(ctx, envFor(r, "wrong"), "api", "commands.list", "tenantId=tenant_a", "nodeId=node_a1")
	require.Equal(t, cli.ExitError, res.code)
	require.Contains(t, res.stderr, "UNAUTHENTICATED")

	res = cliRun(ctx, env, "api")
	require.Equal(t, cli.ExitOK, res.code)
	require.Contains(t, res.stdout, "commands.run")
	require.Contains(t, res.stdout, "notAfterSeconds")

	res = cliRun(ctx, env, "--help")
	require.Equal(t, cli.ExitOK, res.code)
	require.Contains(t, res.stdout, "BC_ENDPOINT")
}

func TestCommandsGetListCancelTables(t *testing.T) {
	t.Parallel()
	r := servertest.Start(t, nil)
	env := envFor(r, servertest.TokOps)
	env["BC_TENANT"] = servertest.TenantA
	ctx := context.Background()
	var ids []string
	for i := 0; i < 3; i++ {
		res := cliRun(ctx, env, "commands", "run", "nodeId=node_a1", "kind=diag.nvml", "--json")
		require.Equal(t, cli.ExitOK, res.code, res.stderr)
		var c map[string]any
		require.NoError(t, json.Unmarshal([]byte(res.stdout), &c))
		ids = append(ids, c["id"].(string))
	}
	res := cliRun(ctx, env, "commands", "list", "nodeId=node_a1", "limit=2")
	require.Equal(t, cli.ExitOK, res.code, res.stderr)
	lines := strings.Split(strings.TrimSpace(res.stdout), "\n")
	require.Len(t, lines, 3)
	require.True(t, strings.HasPrefix(lines[0], "SEQ"), lines[0])
	require.True(t, strings.HasPrefix(lines[1], "3 "), "newest first: %q", lines[1])
	require.Contains(t, res.stderr, "more: cursor=")

	res = cliRun(ctx, env, "commands", "list", "nodeId=node_a1", "limit=2", "--all", "--json")
	require.Equal(t, cli.ExitOK, res.code, res.stderr)
	var page struct {
		Items []map[string]any `json:"items"`
	}
	require.NoError(t, json.Unmarshal([]byte(res.stdout), &page))
	require.Len(t, page.Items, 3, "--all follows the cursor")

	res = cliRun(ctx, env, "commands", "get", ids[0], "nodeId=node_a1")
	require.Equal(t, cli.ExitOK, res.code, res.stderr)
	require.Contains(t, res.stdout, ids[0])
	require.Contains(t, res.stdout, "pending")

	res = cliRun(ctx, env, "commands", "cancel", ids[1], "nodeId=node_a1")
	require.Equal(t, cli.ExitOK, res.code, res.stderr)
	require.Contains(t, res.stdout, "cancelled")
}

// run, get, list and cancel print one style: a table by default, JSON with
// --json (run used to print JSON while the others printed tables).
func TestCommandsPrintTablesByDefaultAndJSONWithFlag(t *testing.T) {
	t.Parallel()
	r := servertest.Start(t, nil)
	env := envFor(r, servertest.TokOps)
	env["BC_TENANT"] = servertest.TenantA
	ctx := context.Background()
	header := regexp.MustCompile(`^SEQ\s+ID\s+NODE\s+KIND\s+STATE\s+REASON\s+REQUESTER\s+CREATED\s+NOT AFTER\n`)

	res := cliRun(ctx, env, "commands", "run", "nodeId=node_a1", "kind=diag.nvml")
	require.Equal(t, cli.ExitOK, res.code, res.stderr)
	require.Regexp(t, header, res.stdout)
	id := regexp.MustCompile(`cmd_[0-9A-Za-z]+`).FindString(res.stdout)
	require.NotEmpty(t, id, res.stdout)
	require.Regexp(t, `\s`+id+`\s+node_a1\s+diag\.nvml\s+pending\s`, res.stdout)

	byDefault := map[string][]string{
		"run":    {"commands", "run", "nodeId=node_a1", "kind=logs.collect"},
		"get":    {"commands", "get", id, "nodeId=node_a1"},
		"list":   {"commands", "list", "nodeId=node_a1"},
		"cancel": {"commands", "cancel", id, "nodeId=node_a1"},
	}
	for name, args := range byDefault {
		res := cliRun(ctx, env, args...)
		require.Equal(t, cli.ExitOK, res.code, "%s: %s", name, res.stderr)
		require.Regexp(t, header, res.stdout, "%s prints a table", name)

		res = cliRun(ctx, env, append(args, "--json")...)
		require.Equal(t, cli.ExitOK, res.code, "%s --json: %s", name, res.stderr)
		var v map[string]any
		require.NoError(t, json.Unmarshal([]byte(res.stdout), &v), "%s --json prints JSON: %s", name, res.stdout)
	}
}

// waitFor runs `commands run --wait` in the background, finds the command it
// queued, and returns it with a channel that yields the CLI's result.
func waitFor(t *testing.T, r *servertest.Running, kind string) (string, *safeBuffer, <-chan result) {
	t.Helper()
	env := envFor(r, servertest.TokOps)
	var out, errb safeBuffer
	done := make(chan result, 1)
	go func() {
		code := cli.Main(context.Background(), cli.Env{
			Args:   []string{"commands", "run", "tenantId=tenant_a", "nodeId=node_a1", "kind=" + kind, "--wait", "--poll", "200ms"},
			Stdout: &out, Stderr: &errb, Getenv: func(k string) string { return env[k] },
		})
		done <- result{code: code, stdout: out.String(), stderr: errb.String()}
	}()
	var id string
	testutil.WaitFor(t, 20*time.Second, "the CLI to queue its command", func() bool {
		items, _, err := r.Queue.List(context.Background(), r.Pool, queue.ListParams{NodeID: servertest.NodeA1, State: queue.Pending})
		require.NoError(t, err)
		for _, c := range items {
			if c.Kind == kind {
				id = c.ID
				return true
			}
		}
		return false
	})
	testutil.WaitFor(t, 20*time.Second, "the CLI to report pending", func() bool {
		return strings.Contains(errb.String(), "pending")
	})
	return id, &errb, done
}

func awaitResult(t *testing.T, done <-chan result) result {
	t.Helper()
	select {
	case res := <-done:
		return res
	case <-time.After(30 * time.Second):
		t.Fatal("the CLI did not return")
		return result{}
	}
}

// "--wait ... follows the command until it settles, shows its progress, and
// exits non-zero when it ends failed, rejected, expired or cancelled."
func TestRunWaitFollowsUntilSettled(t *testing.T) {
	t.Parallel()
	r := servertest.Start(t, nil)

	id, stderr, done := waitFor(t, r, "diag.nvml")
	r.SetState(t, id, queue.Running, "", nil)
	testutil.WaitFor(t, 20*time.Second, "the CLI to show running", func() bool { return strings.Contains(stderr.String(), "running") })
	r.SetProgress(t, id, map[string]any{"percent": 40, "message": "checking ecc"})
	testutil.WaitFor(t, 20*time.Second, "the CLI to show progress", func() bool { return strings.Contains(stderr.String(), "40% checking ecc") })
	r.SetState(t, id, queue.Failed, "ecc.uncorrectable", map[string]any{"checks": []any{"ecc"}})
	res := awaitResult(t, done)
	require.Equal(t, cli.ExitCommandFailed, res.code, res.stderr)
	require.Contains(t, res.stderr, "failed (ecc.uncorrectable)")
	require.Regexp(t, `(?m)^SEQ\s+ID\s+NODE\s+KIND\s+STATE`, res.stdout, "a table, as get, list and cancel print")
	require.Regexp(t, `\sdiag\.nvml\s+failed\s+ecc\.uncorrectable\s`, res.stdout)

	id, _, done = waitFor(t, r, "inventory.refresh")
	r.SetState(t, id, queue.Succeeded, "", map[string]any{"ok": true})
	res = awaitResult(t, done)
	require.Equal(t, cli.ExitOK, res.code, res.stderr)
	require.Regexp(t, `\sinventory\.refresh\s+succeeded\s`, res.stdout)
	require.Contains(t, res.stdout, `result: {"ok":true}`)

	for _, to := range []queue.State{queue.Rejected, queue.Expired} {
		id, _, done = waitFor(t, r, "logs.collect")
		r.SetState(t, id, to, "test", nil)
		res = awaitResult(t, done)
		require.Equal(t, cli.ExitCommandFailed, res.code, "%s: %s", to, res.stderr)
	}
}

// `better-compute commands watch` follows events.
func TestCommandsWatch(t *testing.T) {
	t.Parallel()
	r := servertest.Start(t, nil)
	env := envFor(r, servertest.TokOps)
	ctx := context.Background()
	for _, k := range []string{"diag.nvml", "logs.collect"} {
		res := cliRun(ctx, env, "commands", "run", "tenantId=tenant_a", "nodeId=node_a1", "kind="+k)
		require.Equal(t, cli.ExitOK, res.code, res.stderr)
	}
	res := cliRun(ctx, env, "commands", "watch", "tenantId=tenant_a", "--count", "2", "--json")
	require.Equal(t, cli.ExitOK, res.code, res.stderr)
	lines := strings.Split(strings.TrimSpace(res.stdout), "\n")
	require.Len(t, lines, 2)
	var first map[string]any
	require.NoError(t, json.Unmarshal([]byte(lines[0]), &first))
	require.Equal(t, "node.command.queued", first["type"])
	cursor := first["cursor"].(string)

	// Resume after the first: the second event comes again, and only it.
	res = cliRun(ctx, env, "commands", "watch", "tenantId=tenant_a", "cursor="+cursor, "--count", "1")
	require.Equal(t, cli.ExitOK, res.code, res.stderr)
	require.Contains(t, res.stdout, "kind=logs.collect")
}

// Settings from a config file, overridden by the environment, overridden by flags.
func TestSettingsPrecedence(t *testing.T) {
	t.Parallel()
	r := servertest.Start(t, nil)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "config.yaml")
	require.NoError(t, os.WriteFile(cfg, []byte("endpoint: http://"+r.GRPC+"\ntoken: "+servertest.TokOps+"\ntenant: tenant_a\n"), 0o600))
	ctx := context.Background()
	list := []string{"commands", "list", "nodeId=node_a1"}

	res := cliRun(ctx, map[string]string{"BC_CONFIG": cfg}, list...)
	require.Equal(t, cli.ExitOK, res.code, "from the config file: %s", res.stderr)

	res = cliRun(ctx, map[string]string{"BC_CONFIG": cfg, "BC_TOKEN": "bad"}, list...)
	require.Equal(t, cli.ExitError, res.code, "the environment beats the file")

	res = cliRun(ctx, map[string]string{"BC_CONFIG": cfg, "BC_TOKEN": "bad"}, append(list, "--token", servertest.TokRead)...)
	require.Equal(t, cli.ExitOK, res.code, "a flag beats the environment: %s", res.stderr)

	home := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(home, ".config", "better-compute"), 0o700))
	require.NoError(t, os.Rename(cfg, filepath.Join(home, ".config", "better-compute", "config.yaml")))
	res = cliRun(ctx, map[string]string{"HOME": home}, list...)
	require.Equal(t, cli.ExitOK, res.code, "the default config path: %s", res.stderr)
}

// The built binary, run the way an operator types it.
func TestBuiltBinary(t *testing.T) {
	t.Parallel()
	r := servertest.Start(t, nil)
	bin := testutil.BuildBinary(t, "./controlplane/cmd/better-compute")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "api", "commands.run", "tenantId="+servertest.TenantA, "nodeId="+servertest.NodeA1,
		"kind=node.reboot", "idempotencyKey=reboot-0412")
	cmd.Env = []string{"BC_ENDPOINT=http://" + r.GRPC, "BC_TOKEN=" + servertest.TokOps, "HOME=" + t.TempDir()}
	out, err := cmd.Output()
	require.NoError(t, err)
	var c map[string]any
	require.NoError(t, json.Unmarshal(out, &c))
	require.Equal(t, "pending", c["state"])

	cmd = exec.CommandContext(ctx, bin, "api", "commands.run", "tenantId="+servertest.TenantA, "nodeId=node_nope", "kind=node.reboot")
	cmd.Env = []string{"BC_ENDPOINT=http://" + r.GRPC, "BC_TOKEN=" + servertest.TokOps, "HOME=" + t.TempDir()}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err = cmd.Run()
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee)
	require.Equal(t, cli.ExitError, ee.ExitCode())
	require.Contains(t, stderr.String(), "NOT_FOUND")
}
