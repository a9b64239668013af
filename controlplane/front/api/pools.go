package api

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/better-compute/commands/controlplane/commands/batches"
	"github.com/better-compute/commands/controlplane/fleet/pools"
	"github.com/better-compute/commands/controlplane/internal/apierr"
	"github.com/better-compute/commands/controlplane/internal/errcode"
	"github.com/better-compute/commands/controlplane/modules/remediation"
	"github.com/better-compute/commands/controlplane/trust/auth"
	apiv1 "github.com/better-compute/commands/proto/bc/api/v1"
)

// poolsServer is the Pools service: budgets, nodes' pools, locks.
type poolsServer struct {
	apiv1.UnimplementedPoolsServer
	s *Server
}

// reconcilerServer is the Reconciler service: the platform's plan.
type reconcilerServer struct {
	apiv1.UnimplementedReconcilerServer
	s *Server
}

func poolProto(st pools.Status) *apiv1.Pool {
	p := &apiv1.Pool{TenantId: st.TenantID, Name: st.Pool, MaxConcurrent: int32(st.MaxConcurrent), MaxPerWindow: int32(st.MaxPerWindow),
		WindowSeconds: int64(st.Window / time.Second), BreakerFailures: int32(st.BreakerFailures), BreakerWindowSeconds: int64(st.BreakerWindow / time.Second),
		BreakerReason: st.BreakerReason, Configured: st.Configured, Nodes: int32(st.Nodes), InMaintenance: int32(st.InMaintenance),
		StartedInWindow: int32(st.StartedInWindow), FailuresInWindow: int32(st.FailuresInWindow)}
	if st.BreakerTrippedAt != nil {
		p.BreakerTrippedAt = timestamppb.New(*st.BreakerTrippedAt)
	}
	return p
}

// poolAuth checks that the caller sees the tenant and, with pool set, holds
// permission on compute-pool/{pool}. A tenant it does not see is
// NOT_FOUND.
func poolAuth(ctx context.Context, tenantID, pool, permission string) (*auth.Identity, error) {
	id, ok := auth.FromContext(ctx)
	if !ok {
		return nil, apierr.Errorf(errcode.Unauthenticated, "no authenticated identity")
	}
	if err := auth.CheckID("tenantId", tenantID); err != nil {
		return nil, err
	}
	if pool != "" {
		if err := auth.CheckID("pool", pool); err != nil {
			return nil, err
		}
	}
	if !id.SeesTenant(tenantID) {
		return nil, apierr.New(errcode.NotFound, "tenant "+tenantID+" not found", map[string]string{"tenantId": tenantID})
	}
	if pool != "" && !id.Allowed(permission, auth.PoolResource(pool)) {
		return nil, apierr.New(errcode.PermissionDenied, "missing "+permission+" on "+auth.PoolResource(pool),
			map[string]string{"permission": permission, "resource": auth.PoolResource(pool)})
	}
	return id, nil
}

func tsOrNil(t *time.Time) *timestamppb.Timestamp {
	if t == nil {
		return nil
	}
	return timestamppb.New(*t)
}

// List returns the tenant's pools.
func (p *poolsServer) List(ctx context.Context, req *apiv1.ListPoolsRequest) (*apiv1.ListPoolsResponse, error) {
	s := p.s
	id, err := poolAuth(ctx, req.GetTenantId(), "", auth.PermPoolsRead)
	if err != nil {
		return nil, err
	}
	list, err := pools.List(ctx, s.pool, req.GetTenantId())
	if err != nil {
		return nil, s.fail(ctx, "pools.list", err)
	}
	s.outage.OK()
	out := &apiv1.ListPoolsResponse{}
	for _, st := range list {
		if id.Allowed(auth.PermPoolsRead, auth.PoolResource(st.Pool)) {
			out.Items = append(out.Items, poolProto(st))
		}
	}
	return out, nil
}

func (p *poolsServer) status(ctx context.Context, op, tenantID, pool string) (*apiv1.Pool, error) {
	s := p.s
	st, err := pools.GetStatus(ctx, s.pool, tenantID, pool)
	if err != nil {
		return nil, s.fail(ctx, op, err)
	}
	s.outage.OK()
	return poolProto(st), nil
}

// Get returns one pool; a pool without nodes or a budget is NOT_FOUND.
func (p *poolsServer) Get(ctx context.Context, req *apiv1.GetPoolRequest) (*apiv1.Pool, error) {
	s := p.s
	if err := validID("pool", req.GetPool()); err != nil {
		return nil, err
	}
	if _, err := poolAuth(ctx, req.GetTenantId(), req.GetPool(), auth.PermPoolsRead); err != nil {
		return nil, err
	}
	ok, err := pools.Exists(ctx, s.pool, req.GetTenantId(), req.GetPool())
	if err != nil {
		return nil, s.fail(ctx, "pools.get", err)
	}
	if !ok {
		return nil, apierr.New(errcode.NotFound, "pool "+req.GetPool()+" not found: no node carries it and it has no budget", map[string]string{"pool": req.GetPool()})
	}
	return p.status(ctx, "pools.get", req.GetTenantId(), req.GetPool())
}

// SetBudget sets a pool's budget.
func (p *poolsServer) SetBudget(ctx context.Context, req *apiv1.SetPoolBudgetRequest) (*apiv1.Pool, error) {
	s := p.s
	if err := validID("pool", req.GetPool()); err != nil {
		return nil, err
	}
	id, err := poolAuth(ctx, req.GetTenantId(), req.GetPool(), auth.PermPoolsAdmin)
	if err != nil {
		return nil, err
	}
	patch, err := budgetPatch(req)
	if err != nil {
		return nil, err
	}
	if err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		_, err := pools.Update(ctx, tx, req.GetTenantId(), req.GetPool(), patch, id.Name)
		return err
	}); err != nil {
		return nil, s.fail(ctx, "pools.setBudget", err)
	}
	return p.status(ctx, "pools.setBudget", req.GetTenantId(), req.GetPool())
}

// ResetBreaker closes a pool's breaker.
func (p *poolsServer) ResetBreaker(ctx context.Context, req *apiv1.ResetPoolBreakerRequest) (*apiv1.Pool, error) {
	s := p.s
	if err := validID("pool", req.GetPool()); err != nil {
		return nil, err
	}
	id, err := poolAuth(ctx, req.GetTenantId(), req.GetPool(), auth.PermPoolsAdmin)
	if err != nil {
		return nil, err
	}
	if err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		_, err := pools.ResetBreaker(ctx, tx, req.GetTenantId(), req.GetPool(), id.Name)
		return err
	}); err != nil {
		return nil, s.fail(ctx, "pools.resetBreaker", err)
	}
	return p.status(ctx, "pools.resetBreaker", req.GetTenantId(), req.GetPool())
}

// SetNodePool moves a node into a pool.
func (p *poolsServer) SetNodePool(ctx context.Context, req *apiv1.SetNodePoolRequest) (*apiv1.NodePool, error) {
	s := p.s
	id, err := auth.AuthorizeNode(ctx, s.lookupNode, req.GetTenantId(), req.GetNodeId(), PermNodesAdmin)
	if err != nil {
		return nil, err
	}
	if err := validID("pool", req.GetPool()); err != nil {
		return nil, err
	}
	if _, err := poolAuth(ctx, req.GetTenantId(), req.GetPool(), auth.PermPoolsAdmin); err != nil {
		return nil, err
	}
	if err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		return pools.SetNodePool(ctx, tx, req.GetTenantId(), req.GetNodeId(), req.GetPool(), id.Name)
	}); err != nil {
		return nil, s.fail(ctx, "pools.setNodePool", err)
	}
	s.outage.OK()
	return &apiv1.NodePool{NodeId: req.GetNodeId(), Pool: req.GetPool()}, nil
}

// ListLocks returns the maintenance locks.
func (p *poolsServer) ListLocks(ctx context.Context, req *apiv1.ListMaintenanceLocksRequest) (*apiv1.ListMaintenanceLocksResponse, error) {
	s := p.s
	id, err := poolAuth(ctx, req.GetTenantId(), req.GetPool(), auth.PermPoolsRead)
	if err != nil {
		return nil, err
	}
	locks, err := pools.ListLocks(ctx, s.pool, req.GetTenantId(), req.GetPool())
	if err != nil {
		return nil, s.fail(ctx, "pools.listLocks", err)
	}
	s.outage.OK()
	out := &apiv1.ListMaintenanceLocksResponse{}
	for _, l := range locks {
		if !id.Allowed(auth.PermPoolsRead, auth.PoolResource(l.Pool)) {
			continue
		}
		out.Items = append(out.Items, &apiv1.MaintenanceLock{NodeId: l.NodeID, Pool: l.Pool, Holder: l.Holder, RemediationId: l.RemediationID,
			Action: l.Action, Reason: l.Reason, AcquiredAt: timestamppb.New(l.AcquiredAt)})
	}
	return out, nil
}

// Plan returns the platform's remediations.
func (r *reconcilerServer) Plan(ctx context.Context, req *apiv1.GetReconcilerPlanRequest) (*apiv1.ReconcilerPlan, error) {
	s := r.s
	id, err := poolAuth(ctx, req.GetTenantId(), req.GetPool(), auth.PermPoolsRead)
	if err != nil {
		return nil, err
	}
	rows, err := remediation.List(ctx, s.pool, remediation.ListParams{TenantID: req.GetTenantId(), Pool: req.GetPool(), IncludeFinished: req.GetIncludeFinished()})
	if err != nil {
		return nil, s.fail(ctx, "reconciler.plan", err)
	}
	s.outage.OK()
	out := &apiv1.ReconcilerPlan{}
	for _, x := range rows {
		if !id.Allowed(auth.PermPoolsRead, auth.PoolResource(x.Pool)) {
			continue
		}
		out.Items = append(out.Items, &apiv1.Remediation{Id: x.ID, NodeId: x.NodeID, Pool: x.Pool, Owner: x.Owner, Action: x.Action, Gpu: x.GPU,
			Trigger: x.Trigger, TriggerMessage: x.TriggerMessage, State: x.State, WaitingReason: x.WaitingReason, WaitingMessage: x.WaitingMessage,
			Attempt: int32(x.Attempt), BatchId: x.BatchID, CommandId: x.CommandID, VerifyCommandId: x.VerifyCommandID, Outcome: x.Outcome,
			OutcomeMessage: x.OutcomeMessage, SupersededBy: x.SupersededBy, CreatedAt: timestamppb.New(x.CreatedAt),
			StartedAt: tsOrNil(x.StartedAt), FinishedAt: tsOrNil(x.FinishedAt)})
	}
	return out, nil
}

// ListBatches returns the batches the platform created.
func (r *reconcilerServer) ListBatches(ctx context.Context, req *apiv1.ListPlatformBatchesRequest) (*apiv1.ListPlatformBatchesResponse, error) {
	s := r.s
	if _, err := auth.AuthorizeTenant(ctx, req.GetTenantId(), auth.PermBatchesRead); err != nil {
		return nil, err
	}
	limit := int(req.GetLimit())
	if limit < 0 || limit > 200 {
		return nil, apierr.New(errcode.InvalidInput, "limit must be 0 to 200", map[string]string{"field": "limit"})
	}
	list, err := batches.ListByRequesterPrefix(ctx, s.pool, req.GetTenantId(), remediation.PlatformRequesterPrefix, limit)
	if err != nil {
		return nil, s.fail(ctx, "reconciler.listBatches", err)
	}
	s.outage.OK()
	now := s.now()
	out := &apiv1.ListPlatformBatchesResponse{}
	for _, b := range list {
		out.Items = append(out.Items, batchProto(b, now))
	}
	return out, nil
}

// budgetPatch is the change a SetBudget request asks for: the fields it
// sets (explicit presence), the others kept. A window outside 0 (the
// default hour) or 60 to 2592000 seconds is refused, named.
func budgetPatch(req *apiv1.SetPoolBudgetRequest) (pools.Patch, error) {
	p := pools.Patch{StopAll: req.GetStopAllMaintenance()}
	intp := func(v int32) *int { i := int(v); return &i }
	if req.MaxConcurrent != nil {
		p.MaxConcurrent = intp(req.GetMaxConcurrent())
	}
	if req.MaxPerWindow != nil {
		p.MaxPerWindow = intp(req.GetMaxPerWindow())
	}
	if req.BreakerFailures != nil {
		p.BreakerFailures = intp(req.GetBreakerFailures())
	}
	for _, w := range []struct {
		field string
		set   bool
		secs  int64
		dst   **time.Duration
	}{{"windowSeconds", req.WindowSeconds != nil, req.GetWindowSeconds(), &p.Window},
		{"breakerWindowSeconds", req.BreakerWindowSeconds != nil, req.GetBreakerWindowSeconds(), &p.BreakerWindow}} {
		if !w.set {
			continue
		}
		if w.secs < 0 || w.secs > 30*86400 || (w.secs != 0 && w.secs < 60) {
			return pools.Patch{}, apierr.New(errcode.InvalidInput, fmt.Sprintf("%s %d must be 60 to 2592000 (0 for the default hour)", w.field, w.secs), map[string]string{"field": w.field})
		}
		d := time.Duration(w.secs) * time.Second
		*w.dst = &d
	}
	return p, nil
}
