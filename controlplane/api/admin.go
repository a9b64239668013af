package api

import (
	"context"
	"encoding/json"
	"errors"
	"github.com/better-compute/commands/controlplane/bindings"
	"github.com/jackc/pgx/v5"
	"strconv"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/better-compute/commands/controlplane/api/apierr"
	"github.com/better-compute/commands/controlplane/auth"
	"github.com/better-compute/commands/controlplane/join"
	"github.com/better-compute/commands/controlplane/nodespecs"
	apiv1 "github.com/better-compute/commands/proto/bc/api/v1"
	"github.com/better-compute/commands/sdk/nodespec"
)

// PermNodesAdmin administers a node: join tokens and spec generations.
const PermNodesAdmin = "compute:nodes:admin"

// CreateJoinToken makes a one-time join token for a node.
func (n *nodesServer) CreateJoinToken(ctx context.Context, req *apiv1.CreateJoinTokenRequest) (*apiv1.JoinToken, error) {
	s := n.s
	if _, err := auth.AuthorizeNode(ctx, s.lookupNode, req.GetTenantId(), req.GetNodeId(), PermNodesAdmin); err != nil {
		return nil, err
	}
	if s.join == nil {
		return nil, apierr.New(apierr.Unsupported, "this server runs no gateway (gateway.listen), so nodes cannot join it", nil)
	}
	ttl := time.Duration(req.GetTtlSeconds()) * time.Second
	if req.GetTtlSeconds() < 0 || ttl > join.MaxTTL {
		return nil, apierr.New(apierr.InvalidInput, "ttlSeconds must be from 1 to "+strconv.Itoa(int(join.MaxTTL/time.Second))+" (0 for the default hour)",
			map[string]string{"field": "ttlSeconds"})
	}
	tok, err := s.join.CreateToken(ctx, s.pool, join.TokenRequest{NodeID: req.GetNodeId(), Role: req.GetRole(),
		AllowedKinds: req.GetAllowedKinds(), TTL: ttl})
	if errors.Is(err, join.ErrNodeNotFound) {
		return nil, apierr.New(apierr.NotFound, "node "+req.GetNodeId()+" not found", map[string]string{"nodeId": req.GetNodeId()})
	}
	if err != nil {
		return nil, s.fail(ctx, "nodes.createJoinToken", err)
	}
	return &apiv1.JoinToken{Token: tok.Value, NodeId: tok.NodeID, ExpiresAt: timestamppb.New(tok.ExpiresAt)}, nil
}

// SetSpec stores the node's next spec generation; the node's session pushes it.
func (n *nodesServer) SetSpec(ctx context.Context, req *apiv1.SetNodeSpecRequest) (*apiv1.NodeSpec, error) {
	s := n.s
	if _, err := auth.AuthorizeNode(ctx, s.lookupNode, req.GetTenantId(), req.GetNodeId(), PermNodesAdmin); err != nil {
		return nil, err
	}
	if req.GetSpec() == nil {
		return nil, apierr.New(apierr.InvalidInput, "spec is required", map[string]string{"field": "spec"})
	}
	b, err := protojson.Marshal(req.GetSpec())
	if err != nil {
		return nil, apierr.New(apierr.InvalidInput, "spec: "+err.Error(), map[string]string{"field": "spec"})
	}
	parsed, err := nodespec.Parse(b)
	if err != nil {
		return nil, apierr.New(apierr.InvalidInput, "spec: "+err.Error(), map[string]string{"field": "spec"})
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
	return &apiv1.NodeSpec{NodeId: req.GetNodeId(), Generation: g.Generation, Spec: toStruct(g.Spec)}, nil
}
