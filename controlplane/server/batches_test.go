package server_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/better-compute/commands/controlplane/front/cli"
	"github.com/better-compute/commands/controlplane/server"
	"github.com/better-compute/commands/controlplane/server/serverconfig"
	"github.com/better-compute/commands/controlplane/server/servertest"
	"github.com/better-compute/commands/controlplane/testing/fakedaemon"
	"github.com/better-compute/commands/internal/testutil"
	"github.com/better-compute/commands/internal/trust"
	agentv1 "github.com/better-compute/commands/proto/bc/agent/v1"
	apiv1 "github.com/better-compute/commands/proto/bc/api/v1"
)

func cliAs(t *testing.T, r *servertest.Running, token string, args ...string) (string, string, int) {
	t.Helper()
	var out, errb batchBuf
	conf := filepath.Join(t.TempDir(), "bc.yaml")
	require.NoError(t, os.WriteFile(conf, nil, 0o600))
	code := cli.Main(context.Background(), cli.Env{Args: args, Stdout: &out, Stderr: &errb, Getenv: func(k string) string {
		return map[string]string{"BC_ENDPOINT": "http://" + r.GRPC, "BC_TOKEN": token, "BC_TENANT": servertest.TenantA, "BC_CONFIG": conf}[k]
	}})
	return out.String(), errb.String(), code
}

type batchBuf struct{ b []byte }

func (s *batchBuf) Write(p []byte) (int, error) { s.b = append(s.b, p...); return len(p), nil }
func (s *batchBuf) String() string              { return string(s.b) }

// The 2-of-3 quorum end to end with the control plane's parts: a reboot
// batch is created; its command is pending with awaitingApproval and no
// notBefore; one approval leaves it pending; the second sends it with the
// approval and its leaf's proof, which the node checks itself; get and list
// show notBefore.
func TestServer_RebootBatchUnderATwoOfThreeQuorum(t *testing.T) {
	dir := t.TempDir()
	var approvers []serverconfig.ApproverConfig
	keys := map[string]string{}
	for _, name := range []string{"alice", "bob", "carol"} {
		pub, priv, err := trust.NewEd25519()
		require.NoError(t, err)
		pp, err := trust.MarshalPublicKeyPEM(pub)
		require.NoError(t, err)
		kp, err := trust.MarshalPrivateKeyPEM(priv)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(dir, name+".pub"), pp, 0o644))
		require.NoError(t, os.WriteFile(filepath.Join(dir, name+".pem"), kp, 0o600))
		approvers = append(approvers, serverconfig.ApproverConfig{Name: name, PublicKey: filepath.Join(dir, name+".pub")})
		keys[name] = filepath.Join(dir, name+".pem")
	}
	signing, _ := servertest.Signing(t)
	r := servertest.Start(t, func(c *server.Config) {
		signing(c)
		c.PKI.Approvers, c.PKI.ApprovalThreshold = approvers, 2
	})
	j := r.Join(t, servertest.NodeA1)
	bundle, _, err := trust.VerifyBundle(j.Response.GetTrustBundle().GetSigned(), nil, time.Now())
	require.NoError(t, err)
	require.Len(t, bundle.Approvers, 3)

	// The node: every command signed, a batched one approved by the quorum
	// for its own leaf.
	conn, err := grpc.NewClient(r.Gateway, grpc.WithTransportCredentials(j.Creds))
	require.NoError(t, err)
	defer conn.Close()
	d := fakedaemon.New(servertest.NodeA1)
	d.Kinds = kindDigests(r)
	d.Verify = func(env *agentv1.CommandEnvelope) error {
		c, err := trust.VerifyCommand(&bundle, env, servertest.NodeA1, time.Now())
		if err != nil {
			return err
		}
		if c.GetBatchId() == "" {
			return nil
		}
		_, err = trust.VerifyBatch(&bundle, trust.BatchCheck{Approval: env.GetBatchApproval(), LeafIndex: uint64(env.GetLeafIndex()), Proof: env.GetInclusionProof(),
			BatchID: c.GetBatchId(), NodeID: servertest.NodeA1, Kind: c.GetKind(), PayloadSHA256: trust.PayloadDigest(c.GetPayload())}, time.Now())
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = d.Run(ctx, conn) }()
	testutil.WaitFor(t, 10*time.Second, "welcome", func() bool { return d.Welcome() != nil })

	// Without a batch, the destructive kind is batch-required.
	_, stderr, code := cliAs(t, r, servertest.TokOps, "commands", "run", "nodeId="+servertest.NodeA1, "kind=node.reboot", "idempotencyKey=unbatched")
	require.NotEqual(t, 0, code)
	require.Contains(t, stderr, "batch-required")

	out, stderr, code := cliAs(t, r, servertest.TokOps, "batch", "create", "reason=Reboot node_a1 after the kernel update",
		`scope=[{"subject":"`+servertest.NodeA1+`","kind":"node.reboot"}]`, "idempotencyKey=reboot-batch", "--json")
	require.Equal(t, 0, code, stderr)
	var b struct {
		ID    string `json:"id"`
		State string `json:"state"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &b))
	require.Equal(t, "awaiting-approval", b.State)

	api, err := grpc.NewClient(r.GRPC, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	defer api.Close()
	actx := metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+servertest.TokOps)
	cmds := apiv1.NewCommandsClient(api)
	p, _ := structpb.NewStruct(map[string]any{})
	cmd, err := cmds.Run(actx, &apiv1.RunCommandRequest{TenantId: servertest.TenantA, NodeId: servertest.NodeA1, Kind: "node.reboot", IdempotencyKey: "reboot-0412", BatchId: b.ID, Payload: p})
	require.NoError(t, err)
	require.True(t, cmd.GetAwaitingApproval())
	require.Nil(t, cmd.GetNotBefore())

	// The requester cannot approve; one approval leaves it pending.
	_, stderr, code = cliAs(t, r, servertest.TokOps, "batch", "approve", "--batch", b.ID, "--key", keys["alice"])
	require.NotEqual(t, 0, code, "ops requested the batch")
	require.Contains(t, stderr, "requester-cannot-approve")
	out, stderr, code = cliAs(t, r, servertest.TokAdmin, "batch", "approve", "--batch", b.ID, "--key", keys["alice"])
	require.Equal(t, 0, code, stderr)
	require.Contains(t, out, "1 more approval(s) needed")
	_, stderr, code = cliAs(t, r, servertest.TokAdmin, "batch", "approve", "--batch", b.ID, "--key", keys["alice"])
	require.NotEqual(t, 0, code)
	require.Contains(t, stderr, "each key counts once")
	got, err := cmds.Get(actx, &apiv1.GetCommandRequest{TenantId: servertest.TenantA, NodeId: servertest.NodeA1, CommandId: cmd.GetId()})
	require.NoError(t, err)
	require.Equal(t, "pending", got.GetState())
	require.True(t, got.GetAwaitingApproval())
	require.Empty(t, d.Envelopes(), "nothing goes out before the quorum")

	out, stderr, code = cliAs(t, r, servertest.TokAdmin, "batch", "approve", "--batch", b.ID, "--key", keys["bob"])
	require.Equal(t, 0, code, stderr)
	require.Contains(t, out, "is approved")
	testutil.WaitFor(t, 15*time.Second, "the approved reboot to run", func() bool {
		got, err = cmds.Get(actx, &apiv1.GetCommandRequest{TenantId: servertest.TenantA, NodeId: servertest.NodeA1, CommandId: cmd.GetId()})
		require.NoError(t, err)
		return got.GetState() == "succeeded"
	})
	require.Equal(t, 1, d.Runs(cmd.GetId()), "the node verified the approval and its leaf, and ran it once")
	require.False(t, got.GetAwaitingApproval())
	require.NotNil(t, got.GetNotBefore())
	list, err := cmds.List(actx, &apiv1.ListCommandsRequest{TenantId: servertest.TenantA, NodeId: servertest.NodeA1})
	require.NoError(t, err)
	require.NotNil(t, list.GetItems()[0].GetNotBefore())

	// A command the batch's scope does not hold is INVALID_INPUT.
	_, err = cmds.Run(actx, &apiv1.RunCommandRequest{TenantId: servertest.TenantA, NodeId: servertest.NodeA1, Kind: "diag.nvml", IdempotencyKey: "not-in-scope", BatchId: b.ID})
	require.ErrorContains(t, err, "scope holds no leaf for (node_a1, diag.nvml)")
}
