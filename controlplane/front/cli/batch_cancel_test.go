package cli_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/controlplane/commands/queue"
	"github.com/better-compute/commands/controlplane/front/cli"
	"github.com/better-compute/commands/controlplane/server"
	"github.com/better-compute/commands/controlplane/server/serverconfig"
	"github.com/better-compute/commands/controlplane/server/servertest"
	"github.com/better-compute/commands/internal/trust"
)

// Issue 31: "`batch create` on a server without approver keys prints
// `APPROVALS 0 of 0 (); 0 more needed` and never says that the batch is for
// audit only and its commands run at once."
func TestBatchCreate_WithoutApproverKeysSaysAuditOnly(t *testing.T) {
	t.Parallel()
	r := servertest.Start(t, nil)
	env := envFor(r, servertest.TokOps)
	env["BC_TENANT"] = servertest.TenantA
	ctx := context.Background()
	scope := `scope=[{"subject":"` + servertest.NodeA1 + `","kind":"node.reboot"}]`

	res := cliRun(ctx, env, "batch", "create", "reason=kernel update", scope, "idempotencyKey=audit-batch")
	require.Equal(t, cli.ExitOK, res.code, res.stderr)
	require.Regexp(t, `(?m)^STATE\s+recorded$`, res.stdout)
	require.Regexp(t, `(?m)^APPROVALS\s+none needed: this server has no approver keys \(pki\.approvers\), so the batch is recorded for audit only and its commands run at once$`, res.stdout)
	require.NotContains(t, res.stdout, "more needed")

	// --json is what it was.
	res = cliRun(ctx, env, "batch", "create", "reason=kernel update", scope, "idempotencyKey=audit-batch", "--json")
	require.Equal(t, cli.ExitOK, res.code, res.stderr)
	var b map[string]any
	require.NoError(t, json.Unmarshal([]byte(res.stdout), &b), res.stdout)
	require.Equal(t, "recorded", b["state"])

	res = cliRun(ctx, env, "batch", "list")
	require.Equal(t, cli.ExitOK, res.code, res.stderr)
	require.Regexp(t, regexp.QuoteMeta(b["id"].(string))+`\s+recorded\s+1\s+audit only\s`, res.stdout)
}

// With approver keys the line still counts what is needed.
func TestBatchCreate_WithApproverKeysCountsWhatIsNeeded(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	var approvers []serverconfig.ApproverConfig
	for _, name := range []string{"alice", "bob", "carol"} {
		pub, _, err := trust.NewEd25519()
		require.NoError(t, err)
		pp, err := trust.MarshalPublicKeyPEM(pub)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(dir, name+".pub"), pp, 0o644))
		approvers = append(approvers, serverconfig.ApproverConfig{Name: name, PublicKey: filepath.Join(dir, name+".pub")})
	}
	signing, _ := servertest.Signing(t)
	r := servertest.Start(t, func(c *server.Config) {
		signing(c)
		c.PKI.Approvers, c.PKI.ApprovalThreshold = approvers, 2
	})
	env := envFor(r, servertest.TokOps)
	env["BC_TENANT"] = servertest.TenantA
	res := cliRun(context.Background(), env, "batch", "create", "reason=kernel update",
		`scope=[{"subject":"`+servertest.NodeA1+`","kind":"node.reboot"}]`)
	require.Equal(t, cli.ExitOK, res.code, res.stderr)
	require.Regexp(t, `(?m)^STATE\s+awaiting-approval$`, res.stdout)
	require.Regexp(t, `(?m)^APPROVALS\s+0 of 2 \(\); 2 more needed$`, res.stdout)
}

// Issue 31: "`commands cancel` of an in-flight command prints the row as
// `running` with nothing saying that a cancel was requested; of a terminal
// one, nothing says it was already finished."
func TestCommandsCancel_SaysWhatTheCancelDid(t *testing.T) {
	t.Parallel()
	r := servertest.Start(t, nil)
	env := envFor(r, servertest.TokOps)
	env["BC_TENANT"] = servertest.TenantA
	ctx := context.Background()
	run := func() string {
		res := cliRun(ctx, env, "commands", "run", "nodeId="+servertest.NodeA1, "kind=diag.nvml", "--json")
		require.Equal(t, cli.ExitOK, res.code, res.stderr)
		var c map[string]any
		require.NoError(t, json.Unmarshal([]byte(res.stdout), &c))
		return c["id"].(string)
	}
	move := func(id string, states ...queue.State) {
		for _, s := range states {
			_, ok, err := r.Queue.Transition(ctx, r.Pool, queue.Transition{CommandID: id, To: s, Reason: "test"})
			require.NoError(t, err)
			require.True(t, ok)
		}
	}
	cancel := func(id string, json bool) string {
		args := []string{"commands", "cancel", id, "nodeId=" + servertest.NodeA1}
		if json {
			args = append(args, "--json")
		}
		res := cliRun(ctx, env, args...)
		require.Equal(t, cli.ExitOK, res.code, res.stderr)
		return res.stdout
	}

	pending := run()
	require.Regexp(t, `(?m)^cancelled: the command will not run \(or ran no further\)$`, cancel(pending, false))

	inFlight := run()
	move(inFlight, queue.Dispatched, queue.Running)
	out := cancel(inFlight, false)
	require.Regexp(t, `\s`+inFlight+`\s+node_a1\s+diag\.nvml\s+running\s`, out, "the row still shows the state")
	require.Regexp(t, `(?m)^cancel requested at \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ: the command is in flight \(running\); the node is asked to stop it`, out)
	var got map[string]any
	require.NoError(t, json.Unmarshal([]byte(cancel(inFlight, true)), &got), "--json is JSON alone")
	require.Equal(t, "running", got["state"])
	require.Contains(t, got, "cancelRequestedAt")

	done := run()
	move(done, queue.Dispatched, queue.Running, queue.Succeeded)
	require.Regexp(t, `(?m)^not cancelled: the command had already finished \(succeeded at \d{4}-[^)]+Z\); nothing to cancel$`, cancel(done, false))
	require.NoError(t, json.Unmarshal([]byte(cancel(done, true)), &got))
	require.Equal(t, "succeeded", got["state"])
}
