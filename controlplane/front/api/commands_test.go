package api_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/better-compute/commands/controlplane/commands/queue"
	"github.com/better-compute/commands/controlplane/internal/errcode"
	apiv1 "github.com/better-compute/commands/proto/bc/api/v1"
)

// "{ id: 'cmd_…', seq: 42, state: 'pending', notAfter: …, retrySafe: true, … }"
func TestRunReturnsTheSpecsShape(t *testing.T) {
	t.Parallel()
	b := setup(t)
	payload, err := structpb.NewStruct(map[string]any{"sections": []any{"gpus"}, "rescan": true})
	require.NoError(t, err)
	before := time.Now()
	c, err := b.run(t, tokOps, &apiv1.RunCommandRequest{TenantId: tenantA, NodeId: nodeA1, Kind: "inventory.refresh",
		Payload: payload, IdempotencyKey: "refresh-after-gpu-swap-0412", NotAfterSeconds: ptr[int32](300)})
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(c.GetId(), "cmd_"), c.GetId())
	require.Equal(t, uint32(1), c.GetSeq())
	require.Equal(t, "pending", c.GetState())
	require.True(t, c.GetRetrySafe())
	require.WithinDuration(t, before.Add(300*time.Second), c.GetNotAfter().AsTime(), 5*time.Second)

	b2, err := protojson.Marshal(c)
	require.NoError(t, err)
	var m map[string]any
	require.NoError(t, json.Unmarshal(b2, &m))
	for _, k := range []string{"id", "seq", "state", "notAfter", "retrySafe", "nodeId", "tenantId", "kind", "payload"} {
		require.Contains(t, m, k)
	}
	require.Equal(t, float64(1), m["seq"], "seq is a JSON number, as in the spec's { seq: 42 }")
	for _, k := range []string{"batchId", "awaitingApproval", "notBefore", "bundleKey"} {
		require.NotContains(t, m, k, "%s appears only where it applies", k)
	}

	reboot, err := b.run(t, tokOps, &apiv1.RunCommandRequest{TenantId: tenantA, NodeId: nodeA1, Kind: "node.reboot", IdempotencyKey: "reboot-0412"})
	require.NoError(t, err)
	require.NotNil(t, reboot.RetrySafe, "retrySafe is present even when false")
	require.False(t, reboot.GetRetrySafe())
	require.Equal(t, uint32(2), reboot.GetSeq())
}

// "It accepts an allowlist of kinds; any other kind is UNSUPPORTED."
func TestRunAllowlist(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, k := range []string{"diag.nvml", "inventory.refresh", "logs.collect", "node.reboot"} {
		_, err := b.run(t, tokOps, &apiv1.RunCommandRequest{TenantId: tenantA, NodeId: nodeA1, Kind: k})
		require.NoError(t, err, k)
	}
	// gpu.reset: "bcd also runs gpu.reset, which commands.run does not accept".
	for _, k := range []string{"gpu.reset", "vendor.blink", "no.such.kind"} {
		_, err := b.run(t, tokOps, &apiv1.RunCommandRequest{TenantId: tenantA, NodeId: nodeA1, Kind: k})
		in := requireCode(t, err, errcode.Unsupported)
		require.Equal(t, codes.Unimplemented, in.GRPC)
		require.Equal(t, k, in.Details["kind"])
	}
	items, _, err := b.queue.List(context.Background(), b.pool, queue.ListParams{NodeID: nodeA1})
	require.NoError(t, err)
	require.Len(t, items, 4, "nothing was queued for a refused kind")
}

// "notAfterSeconds (10 to 3,600, default 600)"
func TestRunNotAfterSecondsBounds(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, secs := range []int32{-1, 0, 9, 3601, 86400} {
		_, err := b.run(t, tokOps, &apiv1.RunCommandRequest{TenantId: tenantA, NodeId: nodeA1, Kind: "diag.nvml", NotAfterSeconds: ptr(secs)})
		in := requireCode(t, err, errcode.InvalidInput)
		require.Equal(t, "notAfterSeconds", in.Details["field"], "%d", secs)
	}
	for _, secs := range []int32{10, 3600} {
		before := time.Now()
		c, err := b.run(t, tokOps, &apiv1.RunCommandRequest{TenantId: tenantA, NodeId: nodeA1, Kind: "diag.nvml", NotAfterSeconds: ptr(secs)})
		require.NoError(t, err, "%d", secs)
		require.WithinDuration(t, before.Add(time.Duration(secs)*time.Second), c.GetNotAfter().AsTime(), 5*time.Second)
	}
	before := time.Now()
	c, err := b.run(t, tokOps, &apiv1.RunCommandRequest{TenantId: tenantA, NodeId: nodeA1, Kind: "diag.nvml"})
	require.NoError(t, err)
	require.WithinDuration(t, before.Add(600*time.Second), c.GetNotAfter().AsTime(), 5*time.Second, "default 600")
}

// "idempotencyKey is scoped to your tenant and identity: a retry returns the
// command already queued, and the same key for another kind is CONFLICT."
func TestRunIdempotencyKey(t *testing.T) {
	t.Parallel()
	b := setup(t)
	req := &apiv1.RunCommandRequest{TenantId: tenantA, NodeId: nodeA1, Kind: "diag.nvml", IdempotencyKey: "diag-1"}
	first, err := b.run(t, tokOps, req)
	require.NoError(t, err)
	again, err := b.run(t, tokOps, req)
	require.NoError(t, err)
	require.Equal(t, first.GetId(), again.GetId())
	require.Equal(t, first.GetSeq(), again.GetSeq())

	_, err = b.run(t, tokOps, &apiv1.RunCommandRequest{TenantId: tenantA, NodeId: nodeA1, Kind: "logs.collect", IdempotencyKey: "diag-1"})
	in := requireCode(t, err, errcode.Conflict)
	require.Equal(t, codes.AlreadyExists, in.GRPC)
	require.Equal(t, "diag.nvml", in.Details["kind"], "CONFLICT names the kind the key already has")

	other, err := b.run(t, tokOps2, req)
	require.NoError(t, err)
	require.NotEqual(t, first.GetId(), other.GetId(), "another identity's key is another key")

	next, err := b.run(t, tokOps, &apiv1.RunCommandRequest{TenantId: tenantA, NodeId: nodeA1, Kind: "diag.nvml"})
	require.NoError(t, err)
	require.Equal(t, other.GetSeq()+1, next.GetSeq(), "a retry takes no seq")
}

// "20 concurrent runs with one key make one command"
func TestRunConcurrentSameKeyMakesOneCommand(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const n = 20
	var (
		wg   sync.WaitGroup
		ids  = make([]string, n)
		errs = make([]error, n)
	)
	start := make(chan struct{})
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			c, err := b.run(t, tokOps, &apiv1.RunCommandRequest{TenantId: tenantA, NodeId: nodeA1, Kind: "node.reboot", IdempotencyKey: "reboot-0412"})
			errs[i] = err
			ids[i] = c.GetId()
		}()
	}
	close(start)
	wg.Wait()
	for i := 0; i < n; i++ {
		require.NoError(t, errs[i])
		require.Equal(t, ids[0], ids[i])
	}
	list, err := b.commands().List(as(tokOps), &apiv1.ListCommandsRequest{TenantId: tenantA, NodeId: nodeA1})
	require.NoError(t, err)
	require.Len(t, list.GetItems(), 1)
	require.Equal(t, uint32(1), list.GetItems()[0].GetSeq())
}

// "The node must be visible to your tenant (NOT_FOUND otherwise)", never
// PERMISSION_DENIED, for every method.
func TestInvisibleNodeIsNotFound(t *testing.T) {
	t.Parallel()
	b := setup(t)
	theirs, err := b.run(t, tokOther, &apiv1.RunCommandRequest{TenantId: tenantB, NodeId: nodeB1, Kind: "diag.nvml"})
	require.NoError(t, err)

	for _, tok := range []string{tokOps, tokReader, tokNarrow} {
		for _, tc := range []struct{ tenant, node string }{
			{tenantA, nodeB1},     // another tenant's node through ours
			{tenantB, nodeB1},     // a tenant we are not in
			{tenantA, "node_zzz"}, // no such node
		} {
			_, err := b.run(t, tok, &apiv1.RunCommandRequest{TenantId: tc.tenant, NodeId: tc.node, Kind: "diag.nvml"})
			requireCode(t, err, errcode.NotFound)
			_, err = b.commands().Get(as(tok), &apiv1.GetCommandRequest{TenantId: tc.tenant, NodeId: tc.node, CommandId: theirs.GetId()})
			requireCode(t, err, errcode.NotFound)
			_, err = b.commands().List(as(tok), &apiv1.ListCommandsRequest{TenantId: tc.tenant, NodeId: tc.node})
			requireCode(t, err, errcode.NotFound)
			_, err = b.commands().Cancel(as(tok), &apiv1.CancelCommandRequest{TenantId: tc.tenant, NodeId: tc.node, CommandId: theirs.GetId()})
			requireCode(t, err, errcode.NotFound)
			_, err = apiv1.NewNodesClient(b.conn).Get(as(tok), &apiv1.GetNodeRequest{TenantId: tc.tenant, NodeId: tc.node})
			requireCode(t, err, errcode.NotFound)
		}
	}
	got, err := b.queue.Get(context.Background(), b.pool, nodeB1, theirs.GetId())
	require.NoError(t, err)
	require.Equal(t, queue.Pending, got.State, "the other tenant's command was not cancelled")

	// A command of our own node fetched through another of our nodes.
	mine, err := b.run(t, tokOps, &apiv1.RunCommandRequest{TenantId: tenantA, NodeId: nodeA1, Kind: "diag.nvml"})
	require.NoError(t, err)
	_, err = b.commands().Get(as(tokOps), &apiv1.GetCommandRequest{TenantId: tenantA, NodeId: nodeA2, CommandId: mine.GetId()})
	requireCode(t, err, errcode.NotFound)
}

func TestAuthentication(t *testing.T) {
	t.Parallel()
	b := setup(t)
	req := &apiv1.RunCommandRequest{TenantId: tenantA, NodeId: nodeA1, Kind: "diag.nvml"}
	_, err := b.run(t, "not-a-token", req)
	requireCode(t, err, errcode.Unauthenticated)
	_, err = b.commands().Run(context.Background(), req)
	requireCode(t, err, errcode.Unauthenticated)
}

// compute:nodes:exec to run and cancel, compute:nodes:read to get and list,
// with wildcards; a missing grant on a visible node is PERMISSION_DENIED.
func TestGrants(t *testing.T) {
	t.Parallel()
	b := setup(t)
	c, err := b.run(t, tokOps, &apiv1.RunCommandRequest{TenantId: tenantA, NodeId: nodeA1, Kind: "diag.nvml"})
	require.NoError(t, err)

	// reader: read on every node, no exec.
	_, err = b.run(t, tokReader, &apiv1.RunCommandRequest{TenantId: tenantA, NodeId: nodeA1, Kind: "diag.nvml"})
	in := requireCode(t, err, errcode.PermissionDenied)
	require.Equal(t, "compute:nodes:exec", in.Details["permission"])
	_, err = b.commands().Cancel(as(tokReader), &apiv1.CancelCommandRequest{TenantId: tenantA, NodeId: nodeA1, CommandId: c.GetId()})
	requireCode(t, err, errcode.PermissionDenied)
	_, err = b.commands().Get(as(tokReader), &apiv1.GetCommandRequest{TenantId: tenantA, NodeId: nodeA1, CommandId: c.GetId()})
	require.NoError(t, err)
	_, err = b.commands().List(as(tokReader), &apiv1.ListCommandsRequest{TenantId: tenantA, NodeId: nodeA1})
	require.NoError(t, err)

	// narrow: compute:nodes:* on compute-node/node_gpu* only.
	g, err := b.run(t, tokNarrow, &apiv1.RunCommandRequest{TenantId: tenantA, NodeId: nodeGPU, Kind: "diag.nvml"})
	require.NoError(t, err)
	_, err = b.commands().Get(as(tokNarrow), &apiv1.GetCommandRequest{TenantId: tenantA, NodeId: nodeGPU, CommandId: g.GetId()})
	require.NoError(t, err)
	_, err = b.commands().Cancel(as(tokNarrow), &apiv1.CancelCommandRequest{TenantId: tenantA, NodeId: nodeGPU, CommandId: g.GetId()})
	require.NoError(t, err)
	_, err = b.run(t, tokNarrow, &apiv1.RunCommandRequest{TenantId: tenantA, NodeId: nodeA1, Kind: "diag.nvml"})
	requireCode(t, err, errcode.PermissionDenied)
	_, err = b.commands().List(as(tokNarrow), &apiv1.ListCommandsRequest{TenantId: tenantA, NodeId: nodeA1})
	requireCode(t, err, errcode.PermissionDenied)
}

// "list is newest first by seq, filters by state, and returns up to 200 per
// page (100 by default)", with an opaque cursor.
func TestListPaging(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	const total = 230
	tx, err := b.pool.Begin(ctx)
	require.NoError(t, err)
	for i := 0; i < total; i++ {
		_, _, err := b.queue.Enqueue(ctx, tx, queue.EnqueueParams{TenantID: tenantA, NodeID: nodeA1, Kind: "diag.nvml"})
		require.NoError(t, err)
	}
	require.NoError(t, tx.Commit(ctx))

	cl := b.commands()
	page, err := cl.List(as(tokReader), &apiv1.ListCommandsRequest{TenantId: tenantA, NodeId: nodeA1})
	require.NoError(t, err)
	require.Len(t, page.GetItems(), 100, "100 by default")
	require.Equal(t, uint32(total), page.GetItems()[0].GetSeq(), "newest first")
	page, err = cl.List(as(tokReader), &apiv1.ListCommandsRequest{TenantId: tenantA, NodeId: nodeA1, Limit: ptr[int32](1000)})
	require.NoError(t, err)
	require.Len(t, page.GetItems(), 200, "at most 200")

	var seqs []uint32
	cursor := ""
	for pages := 0; ; pages++ {
		require.Less(t, pages, 20)
		page, err := cl.List(as(tokReader), &apiv1.ListCommandsRequest{TenantId: tenantA, NodeId: nodeA1, Limit: ptr[int32](70), Cursor: cursor})
		require.NoError(t, err)
		for _, c := range page.GetItems() {
			seqs = append(seqs, c.GetSeq())
		}
		if page.GetNextCursor() == "" {
			break
		}
		cursor = page.GetNextCursor()
	}
	require.Len(t, seqs, total)
	for i, s := range seqs {
		require.Equal(t, uint32(total-i), s, "every command once, newest first")
	}

	// Filter by state.
	for _, s := range []int64{5, 7} {
		c, _, err := b.queue.List(ctx, b.pool, queue.ListParams{NodeID: nodeA1, Limit: 1, Cursor: queue.EncodeListCursor(s + 1)})
		require.NoError(t, err)
		b.setState(t, c[0].ID, queue.Failed)
	}
	failed, err := cl.List(as(tokReader), &apiv1.ListCommandsRequest{TenantId: tenantA, NodeId: nodeA1, State: "failed", Limit: ptr[int32](20)})
	require.NoError(t, err)
	require.Len(t, failed.GetItems(), 2)
	require.Equal(t, []uint32{7, 5}, []uint32{failed.GetItems()[0].GetSeq(), failed.GetItems()[1].GetSeq()})

	_, err = cl.List(as(tokReader), &apiv1.ListCommandsRequest{TenantId: tenantA, NodeId: nodeA1, State: "bogus"})
	requireCode(t, err, errcode.InvalidInput)
	_, err = cl.List(as(tokReader), &apiv1.ListCommandsRequest{TenantId: tenantA, NodeId: nodeA1, Cursor: "!!"})
	requireCode(t, err, errcode.InvalidInput)
}

// "commands.cancel ... takes { tenantId, nodeId, commandId } and returns the command"
func TestCancel(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cl := b.commands()
	run := func() *apiv1.Command {
		c, err := b.run(t, tokOps, &apiv1.RunCommandRequest{TenantId: tenantA, NodeId: nodeA1, Kind: "diag.nvml"})
		require.NoError(t, err)
		return c
	}
	cancel := func(id string) (*apiv1.Command, error) {
		return cl.Cancel(as(tokOps), &apiv1.CancelCommandRequest{TenantId: tenantA, NodeId: nodeA1, CommandId: id})
	}

	pending := run()
	c, err := cancel(pending.GetId())
	require.NoError(t, err)
	require.Equal(t, "cancelled", c.GetState(), "a pending command becomes cancelled at once")
	require.NotNil(t, c.GetSettledAt())

	inflight := run()
	b.setState(t, inflight.GetId(), queue.Running)
	c, err = cancel(inflight.GetId())
	require.NoError(t, err)
	require.Equal(t, "running", c.GetState(), "an in-flight command keeps its state")
	require.NotNil(t, c.GetCancelRequestedAt())

	done := run()
	b.setState(t, done.GetId(), queue.Succeeded)
	c, err = cancel(done.GetId())
	require.NoError(t, err)
	require.Equal(t, "succeeded", c.GetState(), "a terminal command is returned unchanged")
	require.Nil(t, c.GetCancelRequestedAt())

	_, err = cancel("cmd_unknown")
	requireCode(t, err, errcode.NotFound)
}

// "node.reboot without a batchId is INVALID_STATE with details:
// { reason: 'batch-required', kind }"
func TestBatchRequiredCarriesDetails(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.queue.RequireBatches(true)
	_, err := b.run(t, tokOps, &apiv1.RunCommandRequest{TenantId: tenantA, NodeId: nodeA1, Kind: "node.reboot", IdempotencyKey: "reboot-0412"})
	in := requireCode(t, err, errcode.InvalidState)
	require.Equal(t, codes.FailedPrecondition, in.GRPC)
	require.Equal(t, "batch-required", in.Details["reason"])
	require.Equal(t, "node.reboot", in.Details["kind"])
}

func TestRunInvalidPayloadNamesTheField(t *testing.T) {
	t.Parallel()
	b := setup(t)
	payload, err := structpb.NewStruct(map[string]any{"rescan": "yes"})
	require.NoError(t, err)
	_, err = b.run(t, tokOps, &apiv1.RunCommandRequest{TenantId: tenantA, NodeId: nodeA1, Kind: "inventory.refresh", Payload: payload})
	in := requireCode(t, err, errcode.InvalidInput)
	require.Contains(t, in.Details["field"], "rescan")
}

// "The command queue refuses other kinds at enqueue with INVALID_STATE
// ("runs a restricted identity that does not accept …")"
func TestRunRestrictedIdentity(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, err := apiv1.NewNodesClient(b.conn).Create(as(tokAdmin), &apiv1.CreateNodeRequest{TenantId: tenantA, NodeId: "node_ramdisk", Role: "discovery", AllowedKinds: []string{"diag.nvml"}})
	require.NoError(t, err)
	_, err = b.run(t, tokOps, &apiv1.RunCommandRequest{TenantId: tenantA, NodeId: "node_ramdisk", Kind: "diag.nvml"})
	require.NoError(t, err)
	_, err = b.run(t, tokOps, &apiv1.RunCommandRequest{TenantId: tenantA, NodeId: "node_ramdisk", Kind: "node.reboot"})
	in := requireCode(t, err, errcode.InvalidState)
	require.Contains(t, in.Message, "runs a restricted identity that does not accept node.reboot")
}
