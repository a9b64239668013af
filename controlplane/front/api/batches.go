package api

import (
	"context"
	"encoding/hex"
	"time"

	"github.com/jackc/pgx/v5"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/better-compute/commands/controlplane/commands/batches"
	"github.com/better-compute/commands/controlplane/internal/pgtx"
	"github.com/better-compute/commands/controlplane/trust/auth"
	apiv1 "github.com/better-compute/commands/proto/bc/api/v1"
)

// batchesServer is bc.api.v1.CommandBatches.
type batchesServer struct {
	apiv1.UnimplementedCommandBatchesServer
	s *Server
}

func (s *Server) quorumNow() batches.Quorum {
	if s.quorumKeys == nil {
		return batches.Quorum{}
	}
	return s.quorumKeys()
}

// Create records a batch; idempotent per caller and key.
func (b *batchesServer) Create(ctx context.Context, req *apiv1.CreateCommandBatchRequest) (*apiv1.CommandBatch, error) {
	s := b.s
	id, err := auth.AuthorizeTenant(ctx, req.GetTenantId(), auth.PermBatchesCreate)
	if err != nil {
		return nil, err
	}
	p := batches.CreateParams{TenantID: req.GetTenantId(), Requester: id.Name, Reason: req.GetReason(), IdempotencyKey: req.GetIdempotencyKey()}
	for _, l := range req.GetScope() {
		p.Scope = append(p.Scope, batches.Leaf{Subject: l.GetSubject(), Kind: l.GetKind(), PayloadSHA256: l.GetPayloadSha256()})
	}
	if req.DeadlineSeconds != nil {
		p.Deadline = time.Duration(req.GetDeadlineSeconds()) * time.Second
	}
	var out batches.Batch
	err = pgtx.InTx(ctx, s.pool, func(tx pgx.Tx) error {
		var err error
		out, _, err = batches.Create(ctx, tx, s.quorumNow(), p, s.now())
		return err
	})
	if err != nil {
		return nil, s.fail(ctx, "commandBatches.create", err)
	}
	s.logger.Info("batch created", "batch_id", out.ID, "tenant_id", out.TenantID, "requester", out.Requester, "leaves", len(out.Scope), "state", out.State)
	return batchProto(out, s.now()), nil
}

// Get returns one batch.
func (b *batchesServer) Get(ctx context.Context, req *apiv1.GetCommandBatchRequest) (*apiv1.CommandBatch, error) {
	s := b.s
	if _, err := auth.AuthorizeTenant(ctx, req.GetTenantId(), auth.PermBatchesRead); err != nil {
		return nil, err
	}
	out, err := batches.Get(ctx, s.pool, req.GetTenantId(), req.GetBatchId())
	if err != nil {
		return nil, s.fail(ctx, "commandBatches.get", err)
	}
	return batchProto(out, s.now()), nil
}

// List returns the tenant's batches, newest first.
func (b *batchesServer) List(ctx context.Context, req *apiv1.ListCommandBatchesRequest) (*apiv1.ListCommandBatchesResponse, error) {
	s := b.s
	if _, err := auth.AuthorizeTenant(ctx, req.GetTenantId(), auth.PermBatchesRead); err != nil {
		return nil, err
	}
	list, err := batches.List(ctx, s.pool, req.GetTenantId(), req.GetState(), int(req.GetLimit()))
	if err != nil {
		return nil, s.fail(ctx, "commandBatches.list", err)
	}
	out := &apiv1.ListCommandBatchesResponse{}
	for _, x := range list {
		out.Items = append(out.Items, batchProto(x, s.now()))
	}
	return out, nil
}

// Approve stores one approver's signature; at the threshold the batch's
// held commands go out.
func (b *batchesServer) Approve(ctx context.Context, req *apiv1.ApproveCommandBatchRequest) (*apiv1.CommandBatch, error) {
	s := b.s
	id, err := auth.AuthorizeTenant(ctx, req.GetTenantId(), auth.PermBatchesApprove)
	if err != nil {
		return nil, err
	}
	var out batches.Batch
	err = pgtx.InTx(ctx, s.pool, func(tx pgx.Tx) error {
		var err error
		out, err = batches.Approve(ctx, tx, s.quorumNow(), req.GetTenantId(), req.GetBatchId(), req.GetKeyId(), req.GetSignature(), id.Name, id.Agent, s.now())
		return err
	})
	if err != nil {
		return nil, s.fail(ctx, "commandBatches.approve", err)
	}
	s.logger.Info("batch approval", "batch_id", out.ID, "key_id", req.GetKeyId(), "by", id.Name, "state", out.State, "needed", out.Needed())
	return batchProto(out, s.now()), nil
}

func batchProto(b batches.Batch, now time.Time) *apiv1.CommandBatch {
	state := b.State
	if state == batches.StateAwaiting && !now.Before(b.Deadline) {
		state = batches.StateExpired
	}
	out := &apiv1.CommandBatch{
		Id: b.ID, TenantId: b.TenantID, Reason: b.Reason, Requester: b.Requester, State: state,
		Deadline: timestamppb.New(b.Deadline), CreatedAt: timestamppb.New(b.CreatedAt), ApprovedAt: ts(b.ApprovedAt),
		TreeSize: uint32(b.TreeSize), RootHash: hex.EncodeToString(b.RootHash), Statement: b.Statement,
		ApprovalsNeeded: uint32(b.Needed()), Threshold: uint32(b.Threshold),
	}
	for _, l := range b.Scope {
		out.Scope = append(out.Scope, &apiv1.BatchLeaf{Subject: l.Subject, Kind: l.Kind, PayloadSha256: l.PayloadSHA256})
	}
	for _, a := range b.Approvals {
		out.Approvals = append(out.Approvals, &apiv1.BatchApproval{KeyId: a.KeyID, Approver: a.Approver, ApprovedAt: timestamppb.New(a.ApprovedAt)})
	}
	return out
}
