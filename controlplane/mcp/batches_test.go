package mcp_test

import (
	"context"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/better-compute/commands/controlplane/ids"
	"github.com/better-compute/commands/controlplane/mcp"
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

// calls returns the Create requests and the bearer tokens they came with.
func (f *fakeBatches) calls() ([]*apiv1.CreateCommandBatchRequest, []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.creates), slices.Clone(f.tokens)
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

// An agent proposes a reboot batch (against the fake CommandBatches: this
// bc-server serves none yet), gets the id, a summary and the approve line,
// then queues node.reboot in it through the real queue, where it waits for
// people's approvals. Nothing ever calls Approve.
func TestProposeAndRunInBatch(t *testing.T) {
	fake, _, addr := startFakeAPI(t, 2)
	cs, _ := connectStdio(t, addr)
	node := servertest.NodeA1

	args := map[string]any{"reason": "Reboot node_a1 after the kernel update", "idempotencyKey": "reboot-a1-batch",
		"scope": []any{map[string]any{"subject": node, "kind": "node.reboot"}}, "deadlineSeconds": 1800}
	out := ok(t, cs, mcp.ToolProposeBatch, args)
	id := out["batchId"].(string)
	require.Regexp(t, `^batch_[0-9A-Z]{26}$`, id)
	require.Equal(t, "awaiting-approval", out["state"])
	require.Equal(t, float64(2), out["approvalsNeeded"])
	require.Equal(t, "better-compute batch approve --tenant tenant_a --batch "+id+" --key approver.pem", out["approveCommand"])
	require.Contains(t, out["summary"], "node.reboot on node_a1")
	require.Contains(t, out["summary"], "Reboot node_a1 after the kernel update")
	require.Contains(t, out["summary"], "2 more approval(s) of 2")
	require.Contains(t, out["notice"], "you cannot approve it")
	require.NotContains(t, out["batch"], "statement", "the signed statement is for approvers' tools")

	creates, tokens := fake.calls()
	require.Len(t, creates, 1)
	want := &apiv1.CreateCommandBatchRequest{TenantId: servertest.TenantA, Reason: "Reboot node_a1 after the kernel update",
		IdempotencyKey: "reboot-a1-batch", DeadlineSeconds: new(int32(1800)),
		Scope: []*apiv1.BatchLeaf{{Subject: node, Kind: "node.reboot"}}}
	require.True(t, proto.Equal(want, creates[0]), "got %v", creates[0])
	require.Equal(t, "Bearer "+TokAgent, tokens[0], "bc-mcp calls as the agent principal")

	again := ok(t, cs, mcp.ToolProposeBatch, args)
	require.Equal(t, id, again["batchId"], "a retry with the key is the same batch")

	// node.reboot in the batch is queued, held for approvals.
	run := ok(t, cs, mcp.ToolExecCommand, map[string]any{"nodeId": node, "kind": "node.reboot", "idempotencyKey": "reboot-a1", "batchId": id})
	cmd := run["command"].(map[string]any)
	require.Equal(t, "pending", cmd["state"])
	require.Equal(t, id, cmd["batchId"])
	require.Equal(t, true, cmd["awaitingApproval"])
	require.Contains(t, run["next"], "held until people approve batch "+id)

	// Not in the batch's scope, or an unknown batch: refused before the queue.
	msg := refused(t, cs, mcp.ToolExecCommand, map[string]any{"nodeId": "node_other", "kind": "node.reboot", "idempotencyKey": "r-x", "batchId": id})
	require.Contains(t, msg, "has no leaf for node.reboot on node_other")
	msg = refused(t, cs, mcp.ToolExecCommand, map[string]any{"nodeId": node, "kind": "node.reboot", "idempotencyKey": "r-y", "batchId": ids.NewBatch()})
	require.Contains(t, msg, "commandBatches.get: NOT_FOUND")

	fake.mu.Lock()
	defer fake.mu.Unlock()
	require.Zero(t, fake.approves, "bc-mcp never calls Approve")
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
