package api

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/better-compute/commands/controlplane/fleet/bindings"
	"github.com/better-compute/commands/controlplane/fleet/nodespecs"
	"github.com/better-compute/commands/controlplane/front/join"
	"github.com/better-compute/commands/controlplane/internal/apierr"
	"github.com/better-compute/commands/controlplane/internal/errcode"
	"github.com/better-compute/commands/controlplane/internal/pgtx"
	"github.com/better-compute/commands/controlplane/trust/auth"
	apiv1 "github.com/better-compute/commands/proto/bc/api/v1"
	"github.com/better-compute/commands/sdk/nodespec"
)

// PermNodesAdmin administers a node: join tokens, spec generations and
// deletion.
const PermNodesAdmin = auth.PermNodesAdmin

// CreateJoinToken makes a one-time join token for a node.
func (n *nodesServer) CreateJoinToken(ctx context.Context, req *apiv1.CreateJoinTokenRequest) (*apiv1.JoinToken, error) {
	s := n.s
	if _, err := auth.AuthorizeNode(ctx, s.lookupNode, req.GetTenantId(), req.GetNodeId(), PermNodesAdmin); err != nil {
		return nil, err
	}
	if s.join == nil {
		return nil, apierr.New(errcode.Unsupported, "this server runs no gateway (gateway.listen), so nodes cannot join it", nil)
	}
	// The bound is checked on the seconds, before they become a Duration:
	// 9223372037 s would overflow into a negative one, 18446744074 s wrap
	// round to 0.29 s.
	maxSecs := int64(join.MaxTTL / time.Second)
	if secs := req.GetTtlSeconds(); secs < 0 || secs > maxSecs {
		return nil, apierr.New(errcode.InvalidInput, "ttlSeconds must be from 1 to "+strconv.FormatInt(maxSecs, 10)+" (0 for the default hour)",
			map[string]string{"field": "ttlSeconds", "min": "1", "max": strconv.FormatInt(maxSecs, 10)})
	}
	ttl := time.Duration(req.GetTtlSeconds()) * time.Second
	tok, err := s.join.CreateToken(ctx, s.pool, join.TokenRequest{NodeID: req.GetNodeId(), Role: req.GetRole(),
		AllowedKinds: req.GetAllowedKinds(), TTL: ttl, Pool: req.GetPool()})
	if errors.Is(err, join.ErrNodeNotFound) {
		return nil, apierr.New(errcode.NotFound, "node "+req.GetNodeId()+" not found", map[string]string{"nodeId": req.GetNodeId()})
	}
	if err != nil {
		return nil, s.fail(ctx, "nodes.createJoinToken", err)
	}
	s.outage.OK()
	return &apiv1.JoinToken{Token: tok.Value, NodeId: tok.NodeID, ExpiresAt: timestamppb.New(tok.ExpiresAt)}, nil
}

// SetSpec stores the node's next spec generation; the node's session pushes it.
func (n *nodesServer) SetSpec(ctx context.Context, req *apiv1.SetNodeSpecRequest) (*apiv1.NodeSpec, error) {
	s := n.s
	if _, err := auth.AuthorizeNode(ctx, s.lookupNode, req.GetTenantId(), req.GetNodeId(), PermNodesAdmin); err != nil {
		return nil, err
	}
	if req.GetSpec() == nil {
		return nil, apierr.New(errcode.InvalidInput, "spec is required", map[string]string{"field": "spec"})
	}
	if err := validJSONText("spec", req.GetSpec()); err != nil {
		return nil, err
	}
	b, err := protojson.Marshal(req.GetSpec())
	if err != nil {
		return nil, apierr.New(errcode.InvalidInput, "spec: "+err.Error(), map[string]string{"field": "spec"})
	}
	parsed, err := nodespec.Parse(b)
	if err != nil {
		return nil, apierr.New(errcode.InvalidInput, "spec: "+err.Error(), map[string]string{"field": "spec"})
	}
	// One transaction: the generation, its signature (with
	// pki.commandSigning) and its allocations' pending bindings land
	// together, so a node never sees an unsigned generation.
	var g nodespecs.Generation
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		signer := s.queue.Signer()
		var err error
		if g, err = nodespecs.Set(ctx, tx, req.GetNodeId(), json.RawMessage(b), signer); err != nil {
			return err
		}
		if signer == nil {
			return nil
		}
		return bindings.Pending(ctx, tx, req.GetNodeId(), g.Generation, parsed)
	})
	if err != nil {
		return nil, s.fail(ctx, "nodes.setSpec", err)
	}
	s.outage.OK()
	s.logger.Info("node spec set", "node_id", g.NodeID, "generation", g.Generation)
	return &apiv1.NodeSpec{NodeId: g.NodeID, Generation: g.Generation, Spec: toStruct(g.Spec)}, nil
}

// GetSpec returns the node's latest spec generation (generation 0 when none).
func (n *nodesServer) GetSpec(ctx context.Context, req *apiv1.GetNodeSpecRequest) (*apiv1.NodeSpec, error) {
	s := n.s
	if _, err := auth.AuthorizeNode(ctx, s.lookupNode, req.GetTenantId(), req.GetNodeId(), auth.PermNodesRead); err != nil {
		return nil, err
	}
	g, err := nodespecs.Latest(ctx, s.pool, req.GetNodeId())
	if err != nil {
		return nil, s.fail(ctx, "nodes.getSpec", err)
	}
	s.outage.OK()
	return &apiv1.NodeSpec{NodeId: req.GetNodeId(), Generation: g.Generation, Spec: toStruct(g.Spec)}, nil
}

// Delete deletes a node: "Deleting a node cancels its pending commands with
// reason node-deleted", and its in-flight ones the same way (the node will
// never report them), each publishing command.settled once, in one
// transaction. The queue announces the deletion, and every gateway closes
// the node's sessions; a deleted node's certificate opens no new session
// and its join tokens no longer join. Afterwards the node is NOT_FOUND.
func (n *nodesServer) Delete(ctx context.Context, req *apiv1.DeleteNodeRequest) (*apiv1.DeletedNode, error) {
	s := n.s
	if _, err := auth.AuthorizeNode(ctx, s.lookupNode, req.GetTenantId(), req.GetNodeId(), PermNodesAdmin); err != nil {
		return nil, err
	}
	var cancelled int64
	err := pgtx.InTx(ctx, s.pool, func(tx pgx.Tx) error {
		var err error
		cancelled, err = s.queue.DeleteNode(ctx, tx, req.GetNodeId())
		return err
	})
	if err != nil {
		return nil, s.fail(ctx, "nodes.delete", err)
	}
	s.outage.OK()
	s.logger.Info("node deleted", "node_id", req.GetNodeId(), "tenant_id", req.GetTenantId(), "cancelled_commands", cancelled)
	return &apiv1.DeletedNode{NodeId: req.GetNodeId(), CancelledCommands: uint32(cancelled)}, nil
}
