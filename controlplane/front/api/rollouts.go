package api

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/better-compute/commands/controlplane/modules/rollout"
	"github.com/better-compute/commands/controlplane/trust/auth"
	apiv1 "github.com/better-compute/commands/proto/bc/api/v1"
)

// rolloutsServer is the Rollouts service: the pools' desired daemon
// versions and their progress.
type rolloutsServer struct {
	apiv1.UnimplementedRolloutsServer
	s *Server
}

func rolloutProto(st rollout.PoolStatus) *apiv1.Rollout {
	out := &apiv1.Rollout{TenantId: st.TenantID, Pool: st.Pool, Version: st.Version, Generation: st.Generation, Paused: st.Paused,
		PausedReason: st.PausedReason, UpdatedAt: timestamppb.New(st.UpdatedAt), RejoinWindowSeconds: int32(st.RejoinWindow / time.Second),
		MaxFailures: int32(st.MaxFailures), Failures: int32(st.Failures)}
	for _, n := range st.Nodes {
		out.Nodes = append(out.Nodes, &apiv1.RolloutNode{NodeId: n.NodeID, Current: n.Current, Target: n.Target, State: n.State,
			CommandId: n.CommandID, Reason: n.Reason, Message: n.Message, Attempts: int32(n.Attempts)})
	}
	return out
}

func (r *rolloutsServer) status(ctx context.Context, op, tenantID, pool string) (*apiv1.Rollout, error) {
	st, err := rollout.Status(ctx, r.s.pool, tenantID, pool)
	if err != nil {
		return nil, r.s.fail(ctx, op, err)
	}
	r.s.outage.OK()
	return rolloutProto(st), nil
}

// Set stores a pool's desired daemon version.
func (r *rolloutsServer) Set(ctx context.Context, req *apiv1.SetRolloutRequest) (*apiv1.Rollout, error) {
	if err := validID("pool", req.GetPool()); err != nil {
		return nil, err
	}
	id, err := poolAuth(ctx, req.GetTenantId(), req.GetPool(), auth.PermPoolsAdmin)
	if err != nil {
		return nil, err
	}
	d := rollout.Desired{TenantID: req.GetTenantId(), Pool: req.GetPool(), Version: req.GetVersion(), PackageURL: req.GetPackageUrl(),
		PackageSize: req.GetPackageSize(), PackageSHA256: req.GetPackageSha256(), Release: req.GetRelease(),
		RejoinWindow: time.Duration(req.GetRejoinWindowSeconds()) * time.Second, MaxFailures: int(req.GetMaxFailures())}
	if err := d.Validate(); err != nil {
		return nil, r.s.fail(ctx, "rollouts.set", err)
	}
	if err := pgx.BeginFunc(ctx, r.s.pool, func(tx pgx.Tx) error {
		_, err := rollout.Set(ctx, tx, d, id.Name)
		return err
	}); err != nil {
		return nil, r.s.fail(ctx, "rollouts.set", err)
	}
	return r.status(ctx, "rollouts.set", req.GetTenantId(), req.GetPool())
}

// Status returns a pool's rollout and its nodes.
func (r *rolloutsServer) Status(ctx context.Context, req *apiv1.GetRolloutRequest) (*apiv1.Rollout, error) {
	if err := validID("pool", req.GetPool()); err != nil {
		return nil, err
	}
	if _, err := poolAuth(ctx, req.GetTenantId(), req.GetPool(), auth.PermPoolsRead); err != nil {
		return nil, err
	}
	return r.status(ctx, "rollouts.status", req.GetTenantId(), req.GetPool())
}

// Pause stops new upgrades in the pool.
func (r *rolloutsServer) Pause(ctx context.Context, req *apiv1.PauseRolloutRequest) (*apiv1.Rollout, error) {
	if err := validID("pool", req.GetPool()); err != nil {
		return nil, err
	}
	id, err := poolAuth(ctx, req.GetTenantId(), req.GetPool(), auth.PermPoolsAdmin)
	if err != nil {
		return nil, err
	}
	reason := req.GetReason()
	if reason == "" {
		reason = "paused by " + id.Name
	}
	if err := pgx.BeginFunc(ctx, r.s.pool, func(tx pgx.Tx) error {
		_, err := rollout.Pause(ctx, tx, req.GetTenantId(), req.GetPool(), reason)
		return err
	}); err != nil {
		return nil, r.s.fail(ctx, "rollouts.pause", err)
	}
	return r.status(ctx, "rollouts.pause", req.GetTenantId(), req.GetPool())
}

// Resume lets a paused rollout go on.
func (r *rolloutsServer) Resume(ctx context.Context, req *apiv1.ResumeRolloutRequest) (*apiv1.Rollout, error) {
	if err := validID("pool", req.GetPool()); err != nil {
		return nil, err
	}
	id, err := poolAuth(ctx, req.GetTenantId(), req.GetPool(), auth.PermPoolsAdmin)
	if err != nil {
		return nil, err
	}
	if err := pgx.BeginFunc(ctx, r.s.pool, func(tx pgx.Tx) error {
		_, err := rollout.Resume(ctx, tx, req.GetTenantId(), req.GetPool(), id.Name)
		return err
	}); err != nil {
		return nil, r.s.fail(ctx, "rollouts.resume", err)
	}
	return r.status(ctx, "rollouts.resume", req.GetTenantId(), req.GetPool())
}

// Retry sends the pool's failed and rolled-back nodes (or the one named) a
// new command and resumes the rollout.
func (r *rolloutsServer) Retry(ctx context.Context, req *apiv1.RetryRolloutRequest) (*apiv1.Rollout, error) {
	if err := validID("pool", req.GetPool()); err != nil {
		return nil, err
	}
	if err := validOptionalID("nodeId", req.GetNodeId()); err != nil {
		return nil, err
	}
	id, err := poolAuth(ctx, req.GetTenantId(), req.GetPool(), auth.PermPoolsAdmin)
	if err != nil {
		return nil, err
	}
	if err := pgx.BeginFunc(ctx, r.s.pool, func(tx pgx.Tx) error {
		_, _, err := rollout.Retry(ctx, tx, req.GetTenantId(), req.GetPool(), req.GetNodeId(), id.Name)
		return err
	}); err != nil {
		return nil, r.s.fail(ctx, "rollouts.retry", err)
	}
	return r.status(ctx, "rollouts.retry", req.GetTenantId(), req.GetPool())
}
