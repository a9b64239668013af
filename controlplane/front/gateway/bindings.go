package gateway

import (
	"context"

	"github.com/better-compute/commands/controlplane/fleet/bindings"
	"github.com/better-compute/commands/controlplane/internal/dbhealth"
	agentv1 "github.com/better-compute/commands/proto/bc/agent/v1"
)

// allocationBound stores a node's AllocationBound: verified against the
// session's own certificate (the node key signed it), it marks the
// allocation bound; a statement that does not verify or names another
// binding marks it refused, with why. The statement and signature are kept
// as received so that consumers verify them again themselves.
func (s *session) allocationBound(ctx context.Context, ab *agentv1.AllocationBound) error {
	if s.g.opts.NodeCA == nil {
		s.logger.Warn("allocation binding not checked: the gateway has no node CA")
		return nil
	}
	b, err := bindings.Attest(ctx, s.g.pool, s.id.NodeID, s.g.opts.NodeCA, s.cert, ab.GetStatement(), ab.GetNodeSig(), s.g.opts.Now())
	switch {
	case err == nil:
		s.logger.Info("allocation bound", "allocation", b.Allocation, "generation", b.Generation, "gpus", b.GPUs)
	case b.Allocation != "":
		s.logger.Warn("allocation binding refused", "allocation", b.Allocation, "error", err)
	default:
		if dbhealth.Transient(err) {
			return s.dbErr(ctx, "storing an allocation binding", err)
		}
		s.logger.Warn("allocation binding refused", "error", err)
	}
	return nil
}
