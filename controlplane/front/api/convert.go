package api

import (
	"encoding/hex"
	"encoding/json"
	"github.com/better-compute/commands/internal/tracing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/better-compute/commands/controlplane/commands/queue"
	"github.com/better-compute/commands/internal/trust"
	apiv1 "github.com/better-compute/commands/proto/bc/api/v1"
)

// toProto renders a command in the spec's shape: retrySafe always present;
// batchId, awaitingApproval, notBefore and bundleKey only where they apply.
func (s *Server) toProto(c queue.Command) *apiv1.Command {
	retrySafe := c.Flags.RetrySafe
	out := &apiv1.Command{
		Id:                c.ID,
		TenantId:          c.TenantID,
		NodeId:            c.NodeID,
		Seq:               uint32(c.Seq),
		Kind:              c.Kind,
		SecretRefs:        queue.SecretRefsOf(c),
		Payload:           toStruct(c.Payload),
		State:             string(c.State),
		Reason:            c.Reason,
		NotAfter:          timestamppb.New(c.NotAfter),
		RetrySafe:         &retrySafe,
		BatchId:           c.BatchID,
		BundleKey:         c.BundleKey,
		CreatedAt:         timestamppb.New(c.CreatedAt),
		UpdatedAt:         timestamppb.New(c.UpdatedAt),
		SettledAt:         ts(c.SettledAt),
		CancelRequestedAt: ts(c.CancelRequestedAt),
		Result:            toValue(c.Result),
		MinGeneration:     c.MinGeneration,
		Progress:          toValue(c.Progress),
		Message:           c.Message,
		NodeSig:           c.NodeSig,
		Signed:            len(c.Signature) > 0,
		ResultBytes:       c.ResultBytes,
		CommandBytes:      c.CommandBytes,
		WaitingReason:     c.WaitingReason,
		WaitingMessage:    c.WaitingMessage,
		KindVersion:       c.KindVersion,
		Rebooted:          c.Rebooted,
		TraceId:           tracing.TraceID(c.TraceParent),
		Requester:         c.Requester,
		RequestedVia:      c.RequestedVia,
		RunId:             queue.RunIDOfKey(c.IdempotencyKey),
	}
	if b := c.Blocked; b != nil {
		out.BlockedBy = &apiv1.BlockedBy{Reason: b.Reason, Message: b.Message, Fix: b.Fix, Kind: b.Kind,
			NodeDigest: b.NodeDigest, NodeVersion: b.NodeVersion, RegistryDigest: b.RegistryDigest, RegistryVersion: b.RegistryVersion,
			Plugin: b.Plugin, PinnedSha256: b.PinnedSHA256, FoundSha256: b.FoundSHA256}
	}
	if len(c.ResultSHA256) > 0 {
		out.ResultSha256 = hex.EncodeToString(c.ResultSHA256)
	}
	if len(c.CommandBytes) > 0 {
		d := trust.CommandDigest(c.CommandBytes)
		out.CommandSha256 = hex.EncodeToString(d[:])
	}
	if c.AwaitingApproval && !c.State.Terminal() {
		// Under the quorum a batched command is held until its batch is
		// approved, which is when notBefore is set.
		out.AwaitingApproval = true
	} else {
		out.NotBefore = ts(c.NotBefore)
	}
	return out
}

func ts(t *time.Time) *timestamppb.Timestamp {
	if t == nil {
		return nil
	}
	return timestamppb.New(*t)
}

// toStruct reads a JSON object; anything else (or nothing) is nil.
func toStruct(b json.RawMessage) *structpb.Struct {
	if len(b) == 0 {
		return nil
	}
	st := &structpb.Struct{}
	if protojson.Unmarshal(b, st) != nil {
		return nil
	}
	return st
}

// toValue reads any JSON value.
func toValue(b json.RawMessage) *structpb.Value {
	if len(b) == 0 {
		return nil
	}
	v := &structpb.Value{}
	if protojson.Unmarshal(b, v) != nil {
		return nil
	}
	return v
}
