package api_test

import (
	"context"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/better-compute/commands/controlplane/commands/batches"
	"github.com/better-compute/commands/controlplane/internal/errcode"
	"github.com/better-compute/commands/internal/trust"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/better-compute/commands/controlplane/commands/queue"
	"github.com/better-compute/commands/controlplane/front/api"
	"github.com/better-compute/commands/controlplane/internal/ids"
	apiv1 "github.com/better-compute/commands/proto/bc/api/v1"
)

// "commands.run then puts a presigned PUT URL for
// support-bundles/{nodeId}/{key}.bundle into the command (key is the
// queue's api:… idempotency key derived from yours, without the api:
// prefix) ... with a byte cap (maxBytes ...) and supportBundle: true ...
// a retry with the same idempotency key presigns nothing new."
func TestLogsCollectGetsASupportBundle(t *testing.T) {
	t.Parallel()
	b := setup(t)
	payload, err := structpb.NewStruct(map[string]any{"since": "2h"})
	require.NoError(t, err)
	req := &apiv1.RunCommandRequest{TenantId: tenantA, NodeId: nodeA1, Kind: "logs.collect", Payload: payload,
		IdempotencyKey: "bundle-0412", NotAfterSeconds: ptr[int32](60)}
	before := time.Now()
	c, err := b.run(t, tokOps, req)
	require.NoError(t, err)
	key := strings.TrimPrefix(queue.APIKey(tenantA, "ops", "bundle-0412"), queue.APIKeyPrefix)
	require.Equal(t, "support-bundles/"+nodeA1+"/"+key+".bundle", c.GetBundleKey())
	f := c.GetPayload().GetFields()
	require.Equal(t, "2h", f["since"].GetStringValue(), "the caller's payload is kept")
	require.True(t, f["supportBundle"].GetBoolValue())
	require.Equal(t, float64(64<<20), f["maxBytes"].GetNumberValue())
	u, err := url.Parse(f["uploadUrl"].GetStringValue())
	require.NoError(t, err)
	require.Contains(t, u.Path, key)
	require.NotContains(t, f["uploadUrl"].GetStringValue(), "0123456789abcdef", "no credential travels in the command")

	again, err := b.run(t, tokOps, req)
	require.NoError(t, err)
	require.Equal(t, c.GetId(), again.GetId())
	require.Equal(t, f["uploadUrl"].GetStringValue(), again.GetPayload().GetFields()["uploadUrl"].GetStringValue(),
		"a retry keeps the URL the command was queued with")
	require.WithinDuration(t, before.Add(60*time.Second), c.GetNotAfter().AsTime(), 5*time.Second)

	got, err := b.commands().Get(as(tokReader), &apiv1.GetCommandRequest{TenantId: tenantA, NodeId: nodeA1, CommandId: c.GetId()})
	require.NoError(t, err)
	require.Equal(t, c.GetBundleKey(), got.GetBundleKey(), "commands.get shows the bundleKey")

	noKey, err := b.run(t, tokOps, &apiv1.RunCommandRequest{TenantId: tenantA, NodeId: nodeA1, Kind: "logs.collect"})
	require.NoError(t, err)
	require.NotEmpty(t, noKey.GetBundleKey(), "a command without an idempotency key still gets a bundle")

	sneaky, err := structpb.NewStruct(map[string]any{"uploadUrl": "https://evil.example.com/x"})
	require.NoError(t, err)
	_, err = b.run(t, tokOps, &apiv1.RunCommandRequest{TenantId: tenantA, NodeId: nodeA1, Kind: "logs.collect", Payload: sneaky})
	requireCode(t, err, errcode.InvalidInput)
}

// "Without supportBundles, logs.collect has no upload destination."
func TestLogsCollectWithoutSupportBundles(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *api.Config) { c.Bundles = nil })
	_, err := b.run(t, tokOps, &apiv1.RunCommandRequest{TenantId: tenantA, NodeId: nodeA1, Kind: "logs.collect"})
	in := requireCode(t, err, errcode.InvalidState)
	require.Equal(t, "no-upload-destination", in.Details["reason"])
}

// "a batched command carries its batchId, and while it waits for approvals
// awaitingApproval: true and no notBefore"
func TestBatchedCommandAwaitsApproval(t *testing.T) {
	t.Parallel()
	pub, _, err := trust.NewEd25519()
	require.NoError(t, err)
	quorum := batches.Quorum{Approvers: []trust.Approver{{Name: "alice", PublicKey: pub}}, Threshold: 1}
	b := setup(t, func(c *api.Config) { c.Quorum = func() batches.Quorum { return quorum } })
	b.queue.RequireBatches(true)
	var batch batches.Batch
	require.NoError(t, pgx.BeginFunc(context.Background(), b.pool, func(tx pgx.Tx) error {
		var err error
		batch, _, err = batches.Create(context.Background(), tx, quorum, batches.CreateParams{TenantID: tenantA, Requester: "ops", Reason: "reboot",
			Scope: []batches.Leaf{{Subject: nodeA1, Kind: "node.reboot"}}}, time.Now())
		return err
	}))
	c, err := b.run(t, tokOps, &apiv1.RunCommandRequest{TenantId: tenantA, NodeId: nodeA1, Kind: "node.reboot",
		IdempotencyKey: "reboot-0412", BatchId: batch.ID})
	require.NoError(t, err)
	require.Equal(t, batch.ID, c.GetBatchId())
	require.True(t, c.GetAwaitingApproval())
	require.Nil(t, c.GetNotBefore())

	// Once approved, notBefore is set and awaitingApproval is gone (what
	// batches.Approve does at the threshold).
	_, err = b.pool.Exec(context.Background(), `UPDATE commands SET awaiting_approval = false, not_before = now() WHERE id = $1`, c.GetId())
	require.NoError(t, err)
	got, err := b.commands().Get(as(tokOps), &apiv1.GetCommandRequest{TenantId: tenantA, NodeId: nodeA1, CommandId: c.GetId()})
	require.NoError(t, err)
	require.False(t, got.GetAwaitingApproval())
	require.NotNil(t, got.GetNotBefore())

	// "the batch must exist in the caller's tenant" (before, a batchId that
	// named no batch was accepted).
	_, err = b.run(t, tokOps, &apiv1.RunCommandRequest{TenantId: tenantA, NodeId: nodeA1, Kind: "node.reboot", BatchId: ids.NewBatch()})
	requireCode(t, err, errcode.InvalidInput)
	_, err = b.run(t, tokOps, &apiv1.RunCommandRequest{TenantId: tenantA, NodeId: nodeA1, Kind: "node.reboot", BatchId: "not-a-batch"})
	requireCode(t, err, errcode.InvalidInput)
}
