package mcp_test

import (
	"bytes"
	"context"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/better-compute/commands/controlplane/front/cli"
	"github.com/better-compute/commands/controlplane/server/serverconfig"
	"github.com/better-compute/commands/internal/trust"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/better-compute/commands/controlplane/front/mcp"
	"github.com/better-compute/commands/controlplane/internal/ids"
	"github.com/better-compute/commands/controlplane/server"
	"github.com/better-compute/commands/controlplane/server/servertest"
	apiv1 "github.com/better-compute/commands/proto/bc/api/v1"
)

// fakeBatches stands in for CommandBatches until bc-server serves it: it
// records what it is asked, answers like the spec (awaiting-approval under
// a quorum of threshold, recorded with threshold 0), is idempotent per key,
// and counts Approve calls, which must stay at zero.
type fakeBatches struct {
	apiv1.UnimplementedCommandBatchesServer
	threshold uint32

	// mu guards the fields below.
	mu       sync.Mutex
	creates  []*apiv1.CreateCommandBatchRequest
	tokens   []string
	byKey    map[string]*apiv1.CommandBatch
	byID     map[string]*apiv1.CommandBatch
	approves int
}

func bearer(ctx context.Context) string {
	md, _ := metadata.FromIncomingContext(ctx)
	if v := md.Get("authorization"); len(v) == 1 {
		return v[0]
	}
	return ""
}

func (f *fakeBatches) Create(ctx context.Context, req *apiv1.CreateCommandBatchRequest) (*apiv1.CommandBatch, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.creates = append(f.creates, proto.Clone(req).(*apiv1.CreateCommandBatchRequest))
	f.tokens = append(f.tokens, bearer(ctx))
	if b, ok := f.byKey[req.GetIdempotencyKey()]; ok {
		return b, nil
	}
	b := &apiv1.CommandBatch{Id: ids.NewBatch(), TenantId: req.GetTenantId(), Reason: req.GetReason(), Scope: req.GetScope(),
		Requester: "agent", State: "awaiting-approval", Deadline: timestamppb.New(time.Now().Add(time.Hour)),
		CreatedAt: timestamppb.Now(), TreeSize: uint32(len(req.GetScope())), RootHash: "ab12",
		Statement: []byte("bc-batch-approval v1 …"), Threshold: f.threshold, ApprovalsNeeded: f.threshold}
	if f.threshold == 0 {
		b.State, b.ApprovedAt = "approved", timestamppb.Now()
	}
	f.byKey[req.GetIdempotencyKey()], f.byID[b.Id] = b, b
	return b, nil
}

func (f *fakeBatches) Get(_ context.Context, req *apiv1.GetCommandBatchRequest) (*apiv1.CommandBatch, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if b, ok := f.byID[req.GetBatchId()]; ok && b.GetTenantId() == req.GetTenantId() {
		return b, nil
	}
	return nil, status.Error(codes.NotFound, "no such batch")
}

func (f *fakeBatches) Approve(context.Context, *apiv1.ApproveCommandBatchRequest) (*apiv1.CommandBatch, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.approves++
	return nil, status.Error(codes.PermissionDenied, "agents never approve")
}

// forward relays the caller's bearer token to the real bc-server.
func forward(ctx context.Context) context.Context {
	return metadata.AppendToOutgoingContext(ctx, "authorization", bearer(ctx))
}

// realCommands and realNodes forward to the real bc-server, so a command
// run in a fake batch lands in the real queue.
type realCommands struct {
	apiv1.UnimplementedCommandsServer
	to apiv1.CommandsClient
}

func (c realCommands) Run(ctx context.Context, req *apiv1.RunCommandRequest) (*apiv1.Command, error) {
	return c.to.Run(forward(ctx), req)
}

func (c realCommands) Get(ctx context.Context, req *apiv1.GetCommandRequest) (*apiv1.Command, error) {
	return c.to.Get(forward(ctx), req)
}

func (c realCommands) List(ctx context.Context, req *apiv1.ListCommandsRequest) (*apiv1.ListCommandsResponse, error) {
	return c.to.List(forward(ctx), req)
}

type realNodes struct {
	apiv1.UnimplementedNodesServer
	to apiv1.NodesClient
}

func (n realNodes) Get(ctx context.Context, req *apiv1.GetNodeRequest) (*apiv1.Node, error) {
	return n.to.Get(forward(ctx), req)
}

// startFakeAPI serves the fake CommandBatches beside Commands and Nodes
// forwarded to a real bc-server (with the batch quorum on, so a batched
// command waits for approvals), on a loopback gRPC listener.
func startFakeAPI(t *testing.T, threshold uint32) (*fakeBatches, *servertest.Running, string) {
	t.Helper()
	r := servertest.Start(t, func(c *server.Config) {
		withAgent(c)
		c.BatchQuorum = true
	})
	conn, err := grpc.NewClient(r.GRPC, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })

	fake := &fakeBatches{threshold: threshold, byKey: map[string]*apiv1.CommandBatch{}, byID: map[string]*apiv1.CommandBatch{}}
	g := grpc.NewServer()
	apiv1.RegisterCommandBatchesServer(g, fake)
	apiv1.RegisterCommandsServer(g, realCommands{to: apiv1.NewCommandsClient(conn)})
	apiv1.RegisterNodesServer(g, realNodes{to: apiv1.NewNodesClient(conn)})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go func() { _ = g.Serve(lis) }()
	t.Cleanup(g.Stop)
	return fake, r, lis.Addr().String()
}

// "An MCP client from the SDK, over stdio, lists the tools (no approve
// tool), runs exec_command for diag.nvml, and proposes a reboot batch that a
// person then approves with the CLI": live against a bc-server with a 1-of-1
// quorum. The agent's own approval is refused whatever its grants; the
// person's `better-compute batch approve` releases the command.
func TestProposeAndRunInBatch(t *testing.T) {
	dir := t.TempDir()
	pub, priv, err := trust.NewEd25519()
	require.NoError(t, err)
	pp, err := trust.MarshalPublicKeyPEM(pub)
	require.NoError(t, err)
	kp, err := trust.MarshalPrivateKeyPEM(priv)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "alice.pub"), pp, 0o644))
	keyFile := filepath.Join(dir, "alice.pem")
	require.NoError(t, os.WriteFile(keyFile, kp, 0o600))
	signing, _ := servertest.Signing(t)
	r := servertest.Start(t, func(c *server.Config) {
		withAgent(c)
		signing(c)
		c.PKI.Approvers = []serverconfig.ApproverConfig{{Name: "alice", PublicKey: filepath.Join(dir, "alice.pub")}}
	})
	cs, _ := connectStdio(t, r.GRPC)
	node := servertest.NodeA1

	args := map[string]any{"reason": "Reboot node_a1 after the kernel update", "idempotencyKey": "reboot-a1-batch",
		"scope": []any{map[string]any{"subject": node, "kind": "node.reboot"}}, "deadlineSeconds": 1800}
	out := ok(t, cs, mcp.ToolProposeBatch, args)
	id := out["batchId"].(string)
	require.Regexp(t, `^batch_[0-9A-Z]{26}$`, id)
	require.Equal(t, "awaiting-approval", out["state"])
	require.Equal(t, "better-compute batch approve --tenant tenant_a --batch "+id+" --key approver.pem", out["approveCommand"])
	require.Contains(t, out["summary"], "node.reboot on node_a1")
	require.Contains(t, out["notice"], "you cannot approve it")
	again := ok(t, cs, mcp.ToolProposeBatch, args)
	require.Equal(t, id, again["batchId"], "a retry with the key is the same batch")

	run := ok(t, cs, mcp.ToolExecCommand, map[string]any{"nodeId": node, "kind": "node.reboot", "idempotencyKey": "reboot-a1", "batchId": id})
	cmd := run["command"].(map[string]any)
	require.Equal(t, "pending", cmd["state"])
	require.Equal(t, true, cmd["awaitingApproval"])
	msg := refused(t, cs, mcp.ToolExecCommand, map[string]any{"nodeId": "node_other", "kind": "node.reboot", "idempotencyKey": "r-x", "batchId": id})
	require.Contains(t, msg, "has no leaf for node.reboot on node_other")

	// The agent's principal cannot approve, even signing with a real key.
	conn, err := grpc.NewClient(r.GRPC, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	defer conn.Close()
	actx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+TokAgent)
	b, err := apiv1.NewCommandBatchesClient(conn).Get(actx, &apiv1.GetCommandBatchRequest{TenantId: servertest.TenantA, BatchId: id})
	require.NoError(t, err)
	sig := trust.SignApproval(priv, b.GetStatement())
	_, err = apiv1.NewCommandBatchesClient(conn).Approve(actx, &apiv1.ApproveCommandBatchRequest{TenantId: servertest.TenantA, BatchId: id, KeyId: sig.KeyID, Signature: sig.Sig})
	require.Equal(t, codes.PermissionDenied, status.Code(err), "%v", err)

	// A person approves with the CLI, as the returned line says.
	var so, se bytes.Buffer
	conf := filepath.Join(t.TempDir(), "bc.yaml")
	require.NoError(t, os.WriteFile(conf, nil, 0o600))
	env := map[string]string{"BC_ENDPOINT": "http://" + r.GRPC, "BC_TOKEN": servertest.TokAdmin, "BC_CONFIG": conf}
	code := cli.Main(context.Background(), cli.Env{Args: []string{"batch", "approve", "--tenant", servertest.TenantA, "--batch", id, "--key", keyFile},
		Stdout: &so, Stderr: &se, Getenv: func(k string) string { return env[k] }})
	require.Equal(t, cli.ExitOK, code, se.String())
	require.Contains(t, so.String(), "is approved")
	got := ok(t, cs, mcp.ToolGetCommand, map[string]any{"nodeId": node, "commandId": cmd["id"]})
	gc := got["command"].(map[string]any)
	require.NotEqual(t, true, gc["awaitingApproval"], "released by the person's approval")
	require.NotEmpty(t, gc["notBefore"])
}

// Without an approver quorum a batch is recorded for audit only and its
// commands would go out at once, so bc-mcp will not queue node.reboot in
// one: no destructive work that no person approved.
func TestBatchWithoutQuorumDoesNotRunReboot(t *testing.T) {
	_, _, addr := startFakeAPI(t, 0)
	cs, _ := connectStdio(t, addr)
	out := ok(t, cs, mcp.ToolProposeBatch, map[string]any{"reason": "reboot", "idempotencyKey": "b",
		"scope": []any{map[string]any{"subject": servertest.NodeA1, "kind": "node.reboot"}}})
	require.Contains(t, out["summary"], "recorded for audit only")
	msg := refused(t, cs, mcp.ToolExecCommand, map[string]any{"nodeId": servertest.NodeA1, "kind": "node.reboot",
		"idempotencyKey": "r", "batchId": out["batchId"]})
	require.Contains(t, msg, "needs no approvals")
}
