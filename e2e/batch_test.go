package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/better-compute/commands/controlplane/front/cli"
	"github.com/better-compute/commands/controlplane/server"
	"github.com/better-compute/commands/controlplane/server/servertest"
	apiv1 "github.com/better-compute/commands/proto/bc/api/v1"
)

// cliAs runs the CLI with another identity's token than the harness's.
func (c *cluster) cliAs(token string, args ...string) (stdout, stderr string, code int) {
	var out, errb bytes.Buffer
	conf := filepath.Join(c.t.TempDir(), "bc.yaml")
	require.NoError(c.t, os.WriteFile(conf, nil, 0o600))
	env := map[string]string{"BC_ENDPOINT": "http://" + c.srv.GRPC, "BC_TOKEN": token, "BC_TENANT": servertest.TenantA, "BC_CONFIG": conf}
	code = cli.Main(context.Background(), cli.Env{Args: args, Stdout: &out, Stderr: &errb, Getenv: func(k string) string { return env[k] }})
	return out.String(), errb.String(), code
}

// "End to end with a 2-of-3 quorum: a reboot batch is created; the command
// is pending with awaitingApproval; one approval leaves it pending; the
// second sends it; bcd verifies and runs it once; get and list show
// notBefore." A real bcd joined with the bundle that carries the approver
// keys checks the approval and its own leaf itself.
func TestE2E_RebootBatchUnderATwoOfThreeQuorum(t *testing.T) {
	approvers, keys := approverKeys(t, "alice", "bob", "carol")
	signing, _ := servertest.Signing(t)
	c := newCluster(t, func(cfg *server.Config) {
		signing(cfg)
		cfg.PKI.Approvers, cfg.PKI.ApprovalThreshold = approvers, 2
	})
	n := c.join()
	n.start()

	out, stderr, code := c.cli("batch", "create", "reason=Reboot node_a1 after the kernel update",
		`scope=[{"subject":"`+servertest.NodeA1+`","kind":"`+kindReboot+`"}]`, "idempotencyKey=reboot-batch", "--json")
	require.Equal(t, 0, code, stderr)
	var b struct {
		ID string `json:"id"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &b))
	p, _ := structpb.NewStruct(map[string]any{})
	cmd, err := c.api.Run(c.ctx(), &apiv1.RunCommandRequest{TenantId: servertest.TenantA, NodeId: servertest.NodeA1, Kind: kindReboot,
		IdempotencyKey: "reboot-0412", BatchId: b.ID, Payload: p})
	require.NoError(t, err)
	require.Equal(t, "pending", cmd.GetState())
	require.True(t, cmd.GetAwaitingApproval())
	require.Nil(t, cmd.GetNotBefore())

	out, stderr, code = c.cliAs(servertest.TokAdmin, "batch", "approve", "--batch", b.ID, "--key", keys["alice"])
	require.Equal(t, 0, code, stderr)
	require.Contains(t, out, "1 more approval(s) needed")
	got := c.get(cmd.GetId())
	require.Equal(t, "pending", got.GetState(), "one approval leaves it pending")
	require.True(t, got.GetAwaitingApproval())

	out, stderr, code = c.cliAs(servertest.TokAdmin, "batch", "approve", "--batch", b.ID, "--key", keys["carol"])
	require.Equal(t, 0, code, stderr)
	require.Contains(t, out, "is approved")
	c.waitState(cmd.GetId(), "running")
	// The reboot: bcd stops and comes back with a new boot id.
	n.stop()
	require.NoError(t, os.WriteFile(n.boot, []byte("boot-2\n"), 0o600))
	n.start()
	got = c.waitState(cmd.GetId(), "succeeded")
	require.True(t, got.GetRebooted())
	require.False(t, got.GetAwaitingApproval())
	require.NotNil(t, got.GetNotBefore())
	require.Equal(t, 1, c.settledCount(cmd.GetId()), "run once")
	list, err := c.api.List(c.ctx(), &apiv1.ListCommandsRequest{TenantId: servertest.TenantA, NodeId: servertest.NodeA1})
	require.NoError(t, err)
	require.NotNil(t, list.GetItems()[0].GetNotBefore())
	require.Contains(t, n.logs.String(), cmd.GetId())
}
