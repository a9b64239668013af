package api

import (
	"context"

	"github.com/jackc/pgx/v5"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/better-compute/commands/controlplane/fleet/bindings"
	"github.com/better-compute/commands/controlplane/internal/apierr"
	"github.com/better-compute/commands/controlplane/internal/errcode"
	"github.com/better-compute/commands/controlplane/trust/auth"
	"github.com/better-compute/commands/controlplane/trust/nodecerts"
	apiv1 "github.com/better-compute/commands/proto/bc/api/v1"
)

// ListCertificates returns the node's certificates and the node CA.
func (n *nodesServer) ListCertificates(ctx context.Context, req *apiv1.ListNodeCertificatesRequest) (*apiv1.NodeCertificates, error) {
	s := n.s
	if _, err := auth.AuthorizeNode(ctx, s.lookupNode, req.GetTenantId(), req.GetNodeId(), auth.PermNodesRead); err != nil {
		return nil, err
	}
	certs, err := nodecerts.List(ctx, s.pool, req.GetNodeId())
	if err != nil {
		return nil, s.fail(ctx, "nodes.listCertificates", err)
	}
	return s.certsProto(certs), nil
}

// RevokeCertificates revokes the node's certificates (one by serial, or
// all); its sessions close.
func (n *nodesServer) RevokeCertificates(ctx context.Context, req *apiv1.RevokeNodeCertificatesRequest) (*apiv1.NodeCertificates, error) {
	s := n.s
	p, err := auth.AuthorizeNode(ctx, s.lookupNode, req.GetTenantId(), req.GetNodeId(), PermNodesAdmin)
	if err != nil {
		return nil, err
	}
	var revoked []nodecerts.Cert
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var err error
		revoked, err = nodecerts.Revoke(ctx, tx, req.GetNodeId(), req.GetSerial(), p.Name)
		return err
	})
	if err != nil {
		return nil, s.fail(ctx, "nodes.revokeCertificates", err)
	}
	if req.GetSerial() != "" && len(revoked) == 0 {
		return nil, apierr.New(errcode.NotFound, "certificate "+req.GetSerial()+" of node "+req.GetNodeId()+" is not a current or superseded certificate of the node",
			map[string]string{"nodeId": req.GetNodeId(), "serial": req.GetSerial()})
	}
	s.logger.Info("node certificates revoked", "node_id", req.GetNodeId(), "serial", req.GetSerial(), "revoked", len(revoked), "by", p.Name)
	return s.certsProto(revoked), nil
}

func (s *Server) certsProto(certs []nodecerts.Cert) *apiv1.NodeCertificates {
	out := &apiv1.NodeCertificates{}
	if s.join != nil {
		out.NodeCaPem = s.join.CA().CertPEM
	}
	for _, c := range certs {
		out.Certificates = append(out.Certificates, &apiv1.NodeCertificate{
			Serial: c.Serial, Role: c.Role, AllowedKinds: c.AllowedKinds,
			NotBefore: timestamppb.New(c.NotBefore), NotAfter: timestamppb.New(c.NotAfter), IssuedAt: timestamppb.New(c.IssuedAt),
			State: c.State(), SupersededAt: ts(c.SupersededAt), RevokedAt: ts(c.RevokedAt), Pem: c.PEM,
		})
	}
	return out
}

// ListBindings returns the allocations the node's spec binds and their
// attestation state.
func (n *nodesServer) ListBindings(ctx context.Context, req *apiv1.ListAllocationBindingsRequest) (*apiv1.AllocationBindings, error) {
	s := n.s
	if _, err := auth.AuthorizeNode(ctx, s.lookupNode, req.GetTenantId(), req.GetNodeId(), auth.PermNodesRead); err != nil {
		return nil, err
	}
	bs, err := bindings.List(ctx, s.pool, req.GetNodeId())
	if err != nil {
		return nil, s.fail(ctx, "nodes.listBindings", err)
	}
	out := &apiv1.AllocationBindings{}
	for _, b := range bs {
		out.Bindings = append(out.Bindings, &apiv1.AllocationBinding{
			Allocation: b.Allocation, Generation: b.Generation, Gpus: b.GPUs, State: b.State, Reason: b.Reason,
			Statement: b.Statement, NodeSig: b.NodeSig, UpdatedAt: timestamppb.New(b.UpdatedAt),
		})
	}
	return out, nil
}
