package kind

import (
	"context"
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	pluginv1 "github.com/better-compute/commands/sdk/proto/bc/plugin/v1"
)

// newHostServer serves a Host as the bc.plugin.v1 Host service: bcd serves
// its own state this way over go-plugin's broker, and harnesses serve test
// data (through sdk/wire/kindpb). A nil h answers every call with
// FailedPrecondition, which the plugin sees as ErrNoHost's situation: no bcd
// behind it.
func newHostServer(h Host) pluginv1.HostServer {
	if h == nil {
		h = noHost{}
	}
	return &hostServer{h: h}
}

type hostServer struct {
	pluginv1.UnimplementedHostServer
	h Host
}

// hostErr maps a Host error to a gRPC status, keeping its text.
func hostErr(err error) error {
	switch {
	case errors.Is(err, ErrNoHost):
		return status.Error(codes.FailedPrecondition, err.Error())
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, err.Error())
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, err.Error())
	default:
		return status.Error(codes.Unknown, err.Error())
	}
}

func (s *hostServer) GetInventory(ctx context.Context, _ *pluginv1.GetInventoryRequest) (*pluginv1.GetInventoryResponse, error) {
	inv, at, err := s.h.Inventory(ctx)
	if err != nil {
		return nil, hostErr(err)
	}
	resp := &pluginv1.GetInventoryResponse{Inventory: inv}
	if !at.IsZero() {
		resp.CollectedAt = timestamppb.New(at)
	}
	return resp, nil
}

func (s *hostServer) PutInventory(ctx context.Context, req *pluginv1.PutInventoryRequest) (*pluginv1.PutInventoryResponse, error) {
	if err := s.h.PutInventory(ctx, req.GetInventory()); err != nil {
		return nil, hostErr(err)
	}
	return &pluginv1.PutInventoryResponse{}, nil
}

func (s *hostServer) GetNodeSpec(ctx context.Context, _ *pluginv1.GetNodeSpecRequest) (*pluginv1.GetNodeSpecResponse, error) {
	gen, spec, err := s.h.NodeSpec(ctx)
	if err != nil {
		return nil, hostErr(err)
	}
	return &pluginv1.GetNodeSpecResponse{Generation: gen, Spec: spec}, nil
}

func (s *hostServer) GetConditions(ctx context.Context, _ *pluginv1.GetConditionsRequest) (*pluginv1.GetConditionsResponse, error) {
	conds, err := s.h.Conditions(ctx)
	if err != nil {
		return nil, hostErr(err)
	}
	resp := &pluginv1.GetConditionsResponse{}
	for _, c := range conds {
		pc := &pluginv1.Condition{Type: c.Type, Status: c.Status, Reason: c.Reason, Message: c.Message}
		if !c.Since.IsZero() {
			pc.Since = timestamppb.New(c.Since)
		}
		resp.Conditions = append(resp.Conditions, pc)
	}
	return resp, nil
}

func (s *hostServer) GetJournal(ctx context.Context, req *pluginv1.GetJournalRequest) (*pluginv1.GetJournalResponse, error) {
	recs, err := s.h.Journal(ctx, int(req.GetLimit()))
	if err != nil {
		return nil, hostErr(err)
	}
	resp := &pluginv1.GetJournalResponse{}
	for _, r := range recs {
		resp.Records = append(resp.Records, r)
	}
	return resp, nil
}
