package api

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/better-compute/commands/controlplane/commands/batches"
	"github.com/better-compute/commands/controlplane/commands/fleetruns"
	"github.com/better-compute/commands/controlplane/commands/queue"
	"github.com/better-compute/commands/controlplane/fleet/nodes"
	"github.com/better-compute/commands/controlplane/internal/apierr"
	"github.com/better-compute/commands/controlplane/internal/errcode"
	"github.com/better-compute/commands/controlplane/trust/auth"
	apiv1 "github.com/better-compute/commands/proto/bc/api/v1"
)

// fleetServer serves fleet.summary: the console's overview.
type fleetServer struct {
	apiv1.UnimplementedFleetServer
	s *Server
}

// Summary counts what the caller may read of the tenant's fleet, in one
// snapshot (a repeatable-read transaction): nodes by connection, health,
// pool, condition and failed check; the commands that failed in the last
// hour; open fleet runs and batches awaiting approval; and whether
// commands are signed.
func (f *fleetServer) Summary(ctx context.Context, req *apiv1.FleetSummaryRequest) (*apiv1.FleetSummary, error) {
	s := f.s
	id, err := identity(ctx)
	if err != nil {
		return nil, err
	}
	if err := validID("tenantId", req.GetTenantId()); err != nil {
		return nil, err
	}
	tenantID := req.GetTenantId()
	if !id.SeesTenant(tenantID) {
		return nil, apierr.New(errcode.NotFound, "tenant "+tenantID+" not found", map[string]string{"tenantId": tenantID})
	}
	now := s.now()
	out := &apiv1.FleetSummary{AsOf: timestamppb.New(now), CommandSigning: s.queue.Signer() != nil,
		ApprovalThreshold: int32(s.quorumNow().Needed())}
	var patterns []string // nil: every node
	if ps := id.ResourcePatterns(auth.PermNodesRead, "compute-node/"); ps != nil {
		patterns = make([]string, len(ps))
		for i, p := range ps {
			patterns[i] = queue.GlobToLike(p)
		}
	}
	err = pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		if patterns != nil && len(patterns) == 0 {
			return nil // no grant reads any node
		}
		sum, err := nodes.Summarise(ctx, tx, tenantID, patterns)
		if err != nil {
			return err
		}
		summaryProto(out, sum)
		return nil
	})
	if err != nil {
		return nil, s.fail(ctx, "fleet.summary", err)
	}
	err = pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		var err error
		if patterns == nil || len(patterns) > 0 {
			if out.FailedLastHour, err = queue.CountFailedSince(ctx, tx, tenantID, now.Add(-time.Hour), patterns); err != nil {
				return err
			}
		}
		// Runs: all of the tenant's with compute:runs:read, else the
		// caller's own (what fleetRuns.list shows it).
		allRuns := id.Allowed(auth.PermRunsRead, auth.TenantResource(tenantID))
		if out.RunsInProgress, err = fleetruns.CountOpen(ctx, tx, tenantID, allRuns, id.Name); err != nil {
			return err
		}
		if id.Allowed(auth.PermBatchesRead, auth.TenantResource(tenantID)) {
			if out.BatchesAwaitingApproval, err = batches.CountAwaitingApproval(ctx, tx, tenantID, now); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, s.fail(ctx, "fleet.summary", err)
	}
	s.outage.OK()
	return out, nil
}

// summaryProto fills the node counts of out from sum.
func summaryProto(out *apiv1.FleetSummary, sum nodes.Summary) {
	out.Nodes, out.Connected, out.Unhealthy = sum.Nodes, sum.Connected, sum.Unhealthy
	out.Healthy = out.Nodes - out.Unhealthy
	out.Pools = make([]*apiv1.PoolCount, len(sum.Pools))
	for i, p := range sum.Pools {
		out.Pools[i] = &apiv1.PoolCount{Pool: p.Pool, Nodes: p.Nodes, Connected: p.Connected, Unhealthy: p.Unhealthy}
	}
	counts := func(cs []nodes.NameCount) []*apiv1.NodeCount {
		ns := make([]*apiv1.NodeCount, len(cs))
		for i, c := range cs {
			ns[i] = &apiv1.NodeCount{Name: c.Name, Nodes: c.Nodes}
		}
		return ns
	}
	out.ByCondition = counts(sum.ByCondition)
	out.ByFailedCheck = counts(sum.ByFailedCheck)
}
