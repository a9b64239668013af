package api

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"

	"github.com/better-compute/commands/controlplane/fleet/labels"
	"github.com/better-compute/commands/controlplane/internal/apierr"
	"github.com/better-compute/commands/controlplane/internal/errcode"
	"github.com/better-compute/commands/controlplane/internal/pgtx"
	"github.com/better-compute/commands/controlplane/trust/auth"
	apiv1 "github.com/better-compute/commands/proto/bc/api/v1"
)

// SetLabels changes a node's labels (compute:nodes:admin on the node) and
// returns the node; publishes node.labels.set.
func (n *nodesServer) SetLabels(ctx context.Context, req *apiv1.SetNodeLabelsRequest) (*apiv1.Node, error) {
	s := n.s
	id, err := auth.AuthorizeNode(ctx, s.lookupNode, req.GetTenantId(), req.GetNodeId(), auth.PermNodesAdmin)
	if err != nil {
		return nil, err
	}
	change := labels.Change{Set: req.GetLabels(), Remove: req.GetRemove(), Replace: req.GetReplace()}
	err = pgtx.InTx(ctx, s.pool, func(tx pgx.Tx) error {
		_, err := labels.Set(ctx, tx, req.GetTenantId(), req.GetNodeId(), change, id.Name)
		return err
	})
	if errors.Is(err, labels.ErrNodeNotFound) {
		return nil, apierr.New(errcode.NotFound, "node "+req.GetNodeId()+" not found", map[string]string{"nodeId": req.GetNodeId()})
	}
	if err != nil {
		return nil, s.fail(ctx, "nodes.setLabels", err)
	}
	s.outage.OK()
	return n.Get(ctx, &apiv1.GetNodeRequest{TenantId: req.GetTenantId(), NodeId: req.GetNodeId()})
}
