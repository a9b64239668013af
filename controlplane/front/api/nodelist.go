package api

import (
	"context"
	"encoding/base64"
	"fmt"
	"strings"

	"github.com/better-compute/commands/controlplane/commands/queue"
	"github.com/better-compute/commands/controlplane/fleet/labels"
	"github.com/better-compute/commands/controlplane/fleet/nodes"
	"github.com/better-compute/commands/controlplane/internal/apierr"
	"github.com/better-compute/commands/controlplane/internal/errcode"
	"github.com/better-compute/commands/controlplane/trust/auth"
	apiv1 "github.com/better-compute/commands/proto/bc/api/v1"
)

// nodeListChunk is how many rows nodes.list reads at a time while it fills
// a page with the nodes the caller may read.
const nodeListChunk = 256

// List returns a page of the tenant's nodes by id, each with its
// conditions and session. Like pools.list it lists what the caller may
// read: a node without compute:nodes:read for the caller is left out, not
// refused, so that a narrow identity lists its own nodes; a tenant the
// caller does not see is NOT_FOUND.
func (n *nodesServer) List(ctx context.Context, req *apiv1.ListNodesRequest) (*apiv1.ListNodesResponse, error) {
	s := n.s
	id, ok := auth.FromContext(ctx)
	if !ok {
		return nil, apierr.Errorf(errcode.Unauthenticated, "no authenticated identity")
	}
	if err := validID("tenantId", req.GetTenantId()); err != nil {
		return nil, err
	}
	if !id.SeesTenant(req.GetTenantId()) {
		return nil, apierr.New(errcode.NotFound, "tenant "+req.GetTenantId()+" not found", map[string]string{"tenantId": req.GetTenantId()})
	}
	if req.GetPool() != "" {
		if err := validID("pool", req.GetPool()); err != nil {
			return nil, err
		}
	}
	limit := int(req.GetLimit())
	switch {
	case limit < 0:
		return nil, invalid("limit", "limit must not be negative (0 or unset for 100, at most 200)")
	case limit == 0:
		limit = queue.DefaultListLimit
	case limit > queue.MaxListLimit:
		limit = queue.MaxListLimit
	}
	sel, err := labels.Parse(req.GetSelector())
	if err != nil {
		return nil, s.fail(ctx, "nodes.list", err)
	}
	f, err := nodeFilterOf(req, sel)
	if err != nil {
		return nil, err
	}
	after, err := DecodeNodeCursor(req.GetCursor())
	if err != nil {
		return nil, invalid("cursor", err.Error()+": pass nextCursor from the previous page, or none for the first")
	}
	var rows []nodeRow
	more := false
	for !more {
		chunk, err := s.nodeChunk(ctx, req.GetTenantId(), f, after)
		if err != nil {
			return nil, s.fail(ctx, "nodes.list", err)
		}
		for _, r := range chunk {
			after = r.node.GetId()
			if !id.Allowed(auth.PermNodesRead, auth.NodeResource(r.node.GetId())) {
				continue
			}
			if len(rows) == limit {
				more = true
				break
			}
			rows = append(rows, r)
		}
		if len(chunk) < nodeListChunk {
			break
		}
	}
	s.outage.OK()
	ids := make([]string, len(rows))
	for i, r := range rows {
		ids[i] = r.node.GetId()
	}
	rc, err := platformConditions(ctx, s.pool, ids)
	if err != nil {
		return nil, s.fail(ctx, "nodes.list", err)
	}
	out := &apiv1.ListNodesResponse{}
	for _, r := range rows {
		out.Items = append(out.Items, nodeProtoWith(r, rc[r.node.GetId()]))
	}
	if more {
		out.NextCursor = EncodeNodeCursor(rows[len(rows)-1].node.GetId())
	}
	return out, nil
}

// nodeChunk reads the next nodeListChunk live nodes of the tenant that
// pass f after the id after, by id.
func (s *Server) nodeChunk(ctx context.Context, tenantID string, f nodes.Filter, after string) ([]nodeRow, error) {
	rs, err := nodes.List(ctx, s.pool, tenantID, f, after, nodeListChunk)
	if err != nil {
		return nil, err
	}
	out := make([]nodeRow, 0, len(rs))
	for _, r := range rs {
		x, err := nodeRowOf(r)
		if err != nil {
			return nil, fmt.Errorf("listing the nodes of %s: %w", tenantID, err)
		}
		out = append(out, x)
	}
	return out, nil
}

const nodeCursorPrefix = "node:"

// EncodeNodeCursor makes the opaque cursor of a nodes.list page that
// continues after the node nodeID.
func EncodeNodeCursor(nodeID string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(nodeCursorPrefix + nodeID))
}

// DecodeNodeCursor reads a cursor made by EncodeNodeCursor: the node id the
// next page starts after; "" is the first page.
func DecodeNodeCursor(c string) (string, error) {
	if c == "" {
		return "", nil
	}
	b, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil {
		return "", fmt.Errorf("malformed cursor %q", c)
	}
	nodeID, ok := strings.CutPrefix(string(b), nodeCursorPrefix)
	if !ok || auth.CheckID("cursor", nodeID) != nil {
		return "", fmt.Errorf("malformed cursor %q", c)
	}
	return nodeID, nil
}
