package api

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/better-compute/commands/controlplane/commands/batches"
	"github.com/better-compute/commands/controlplane/commands/bundles"
	"github.com/better-compute/commands/controlplane/commands/fleetruns"
	"github.com/better-compute/commands/controlplane/internal/apierr"
	"github.com/better-compute/commands/controlplane/internal/errcode"
	"github.com/better-compute/commands/controlplane/trust/auth"
	apiv1 "github.com/better-compute/commands/proto/bc/api/v1"
)

type fleetRunsServer struct {
	apiv1.UnimplementedFleetRunsServer
	s *Server
}

// Create creates a fleet run: the kind passes commands.run's allowlist and
// API-runnable checks, each target node the caller's compute:nodes:exec
// (a node without it is refused, listed with the reason), and its payload
// the kind's schema.
func (f *fleetRunsServer) Create(ctx context.Context, req *apiv1.CreateFleetRunRequest) (*apiv1.FleetRun, error) {
	s := f.s
	if s.fleet == nil {
		return nil, apierr.New(errcode.Unsupported, "this server runs no fleet runs", nil)
	}
	id, err := identity(ctx)
	if err != nil {
		return nil, err
	}
	if err := seesTenant(id, req.GetTenantId()); err != nil {
		return nil, err
	}
	m, err := s.runnable("fleet runs, as commands.run, do", req.GetKind())
	if err != nil {
		return nil, err
	}
	if id.Agent && m.Flags.Destructive && !s.quorumNow().On() {
		// An agent's destructive work goes only as a batch a person
		// approves: without approver keys a batch is audit-only.
		return nil, apierr.New(errcode.PermissionDenied, fmt.Sprintf("an agent may not run %s (destructive) on a fleet while no approver keys are configured: a person must approve it", req.GetKind()),
			map[string]string{"kind": req.GetKind(), "reason": "agent-destructive"})
	}
	secs := int32(DefaultNotAfterSeconds)
	if req.NotAfterSeconds != nil {
		secs = req.GetNotAfterSeconds()
	}
	if secs < MinNotAfterSeconds || secs > MaxNotAfterSeconds {
		return nil, apierr.New(errcode.InvalidInput,
			fmt.Sprintf("notAfterSeconds %d is outside %d to %d", secs, MinNotAfterSeconds, MaxNotAfterSeconds),
			map[string]string{"field": "notAfterSeconds", "min": strconv.Itoa(MinNotAfterSeconds), "max": strconv.Itoa(MaxNotAfterSeconds)})
	}
	var approval time.Duration
	if req.ApprovalDeadlineSeconds != nil {
		approval = time.Duration(req.GetApprovalDeadlineSeconds()) * time.Second
		if approval < batches.MinDeadline || approval > batches.MaxDeadline {
			return nil, invalid("approvalDeadlineSeconds", fmt.Sprintf("approvalDeadlineSeconds %d is outside %d to %d", req.GetApprovalDeadlineSeconds(), int(batches.MinDeadline/time.Second), int(batches.MaxDeadline/time.Second)))
		}
	}
	var payload []byte
	if req.GetPayload() != nil {
		if err := validJSONText("payload", req.GetPayload()); err != nil {
			return nil, err
		}
		if payload, err = protojson.Marshal(req.GetPayload()); err != nil {
			return nil, apierr.New(errcode.InvalidInput, "payload: "+err.Error(), map[string]string{"field": "payload"})
		}
	}
	// The payload is checked once, as commands.run would check it for any
	// node: a bad one is refused before anything is stored.
	checked := payload
	if req.GetKind() == logsCollect {
		// As commands.run: the server presigns each node's upload (the
		// advancer, through the fleet service's Prepare), and a caller
		// never picks the destination or the cap. The schema is checked
		// with the fields the presign will add.
		if s.bundles == nil {
			return nil, apierr.New(errcode.InvalidState, bundles.ErrNoDestination.Error(),
				map[string]string{"kind": logsCollect, "reason": "no-upload-destination"})
		}
		merged, err := bundles.MergePayload(payload, "support-bundles/payload-check.bundle",
			bundles.UploadFields{UploadURL: "https://payload-check.invalid/", MaxBytes: bundles.DefaultMaxBytes, SupportBundle: true})
		if err != nil {
			return nil, apierr.New(errcode.InvalidInput, err.Error(), map[string]string{"kind": logsCollect, "field": "payload"})
		}
		checked = merged
	}
	// The payload does not depend on the node or the batch (the run makes
	// its own): one check for every target.
	if _, _, err := s.queue.CheckPayload(req.GetKind(), checked); err != nil {
		return nil, s.fail(ctx, "fleetRuns.create", err)
	}
	t := req.GetTargets()
	run, _, err := s.fleet.Create(ctx, fleetruns.CreateParams{
		TenantID: req.GetTenantId(), Kind: req.GetKind(), Payload: payload,
		Targets:        fleetruns.Targets{NodeIDs: t.GetNodeIds(), Pool: t.GetPool(), Selector: t.GetSelector(), Conditions: t.GetConditions(), All: t.GetAll()},
		MaxConcurrency: req.GetMaxConcurrency(), MaxErrors: req.GetMaxErrors(), NotAfterSeconds: int(secs),
		IdempotencyKey: req.GetIdempotencyKey(), Reason: req.GetReason(),
		Requester: id.Name, RequestedVia: requestedVia(id), ApprovalDeadline: approval,
		Authorize: func(nodeID string) string {
			if id.Allowed(auth.PermNodesExec, auth.NodeResource(nodeID)) {
				return ""
			}
			return "missing " + auth.PermNodesExec + " on " + auth.NodeResource(nodeID)
		},
	})
	if err != nil {
		return nil, s.fail(ctx, "fleetRuns.create", err)
	}
	s.outage.OK()
	return runProto(run), nil
}

// readRun checks that the caller may read run runID of the tenant (the
// run's requester, or compute:runs:read on the tenant) and returns it.
func (f *fleetRunsServer) readRun(ctx context.Context, tenantID, runID, permission string) (*auth.Identity, fleetruns.Run, error) {
	s := f.s
	if s.fleet == nil {
		return nil, fleetruns.Run{}, apierr.New(errcode.Unsupported, "this server runs no fleet runs", nil)
	}
	id, err := identity(ctx)
	if err != nil {
		return nil, fleetruns.Run{}, err
	}
	if err := validID("tenantId", tenantID); err != nil {
		return nil, fleetruns.Run{}, err
	}
	if err := validID("runId", runID); err != nil {
		return nil, fleetruns.Run{}, err
	}
	if !id.SeesTenant(tenantID) {
		return nil, fleetruns.Run{}, s.fail(ctx, "fleetRuns", fleetruns.NotFound(runID))
	}
	run, err := s.fleet.Get(ctx, tenantID, runID)
	if err != nil {
		return nil, fleetruns.Run{}, s.fail(ctx, "fleetRuns", err)
	}
	if run.Requester != id.Name && !id.Allowed(permission, auth.TenantResource(tenantID)) {
		// Only the run's requester may act without the grant.
		return nil, fleetruns.Run{}, auth.Denied(permission, auth.TenantResource(tenantID))
	}
	return id, run, nil
}

// Get returns a run with its counts.
func (f *fleetRunsServer) Get(ctx context.Context, req *apiv1.GetFleetRunRequest) (*apiv1.FleetRun, error) {
	_, run, err := f.readRun(ctx, req.GetTenantId(), req.GetRunId(), auth.PermRunsRead)
	if err != nil {
		return nil, err
	}
	return runProto(run), nil
}

// List returns the tenant's runs, newest first: all of them with
// compute:runs:read, else the caller's own.
func (f *fleetRunsServer) List(ctx context.Context, req *apiv1.ListFleetRunsRequest) (*apiv1.ListFleetRunsResponse, error) {
	s := f.s
	if s.fleet == nil {
		return nil, apierr.New(errcode.Unsupported, "this server runs no fleet runs", nil)
	}
	id, err := identity(ctx)
	if err != nil {
		return nil, err
	}
	if err := seesTenant(id, req.GetTenantId()); err != nil {
		return nil, err
	}
	own := ""
	if !id.Allowed(auth.PermRunsRead, auth.TenantResource(req.GetTenantId())) {
		own = id.Name // the caller's own runs, filtered before paging
	}
	runs, next, err := s.fleet.List(ctx, req.GetTenantId(), req.GetState(), own, int(req.GetLimit()), req.GetCursor())
	if err != nil {
		return nil, s.fail(ctx, "fleetRuns.list", err)
	}
	out := &apiv1.ListFleetRunsResponse{NextCursor: next}
	for _, r := range runs {
		out.Items = append(out.Items, runProto(r))
	}
	return out, nil
}

// ListTargets returns a page of a run's targets.
func (f *fleetRunsServer) ListTargets(ctx context.Context, req *apiv1.ListFleetRunTargetsRequest) (*apiv1.ListFleetRunTargetsResponse, error) {
	if _, _, err := f.readRun(ctx, req.GetTenantId(), req.GetRunId(), auth.PermRunsRead); err != nil {
		return nil, err
	}
	ts, next, err := f.s.fleet.Targets(ctx, req.GetTenantId(), req.GetRunId(), req.GetState(), int(req.GetLimit()), req.GetCursor())
	if err != nil {
		return nil, f.s.fail(ctx, "fleetRuns.listTargets", err)
	}
	out := &apiv1.ListFleetRunTargetsResponse{NextCursor: next}
	for _, t := range ts {
		out.Items = append(out.Items, targetProto(t))
	}
	return out, nil
}

// Pause pauses a run (its requester, or compute:runs:admin).
func (f *fleetRunsServer) Pause(ctx context.Context, req *apiv1.FleetRunActionRequest) (*apiv1.FleetRun, error) {
	return f.control(ctx, req, "fleetRuns.pause", f.s.fleet.Pause)
}

// Resume resumes a paused run.
func (f *fleetRunsServer) Resume(ctx context.Context, req *apiv1.FleetRunActionRequest) (*apiv1.FleetRun, error) {
	return f.control(ctx, req, "fleetRuns.resume", f.s.fleet.Resume)
}

// Cancel cancels a run.
func (f *fleetRunsServer) Cancel(ctx context.Context, req *apiv1.FleetRunActionRequest) (*apiv1.FleetRun, error) {
	return f.control(ctx, req, "fleetRuns.cancel", f.s.fleet.Cancel)
}

func (f *fleetRunsServer) control(ctx context.Context, req *apiv1.FleetRunActionRequest, op string,
	act func(ctx context.Context, tenantID, runID, by string) (fleetruns.Run, error)) (*apiv1.FleetRun, error) {
	id, _, err := f.readRun(ctx, req.GetTenantId(), req.GetRunId(), auth.PermRunsAdmin)
	if err != nil {
		return nil, err
	}
	run, err := act(ctx, req.GetTenantId(), req.GetRunId(), id.Name)
	if err != nil {
		return nil, f.s.fail(ctx, op, err)
	}
	f.s.outage.OK()
	return runProto(run), nil
}

func runProto(r fleetruns.Run) *apiv1.FleetRun {
	c := r.Counts
	out := &apiv1.FleetRun{
		Id: r.ID, TenantId: r.TenantID, Kind: r.Kind, Payload: toStruct(r.Payload),
		Targets: &apiv1.FleetRunTargets{NodeIds: r.Targets.NodeIDs, Pool: r.Targets.Pool, Selector: r.Targets.Selector,
			Conditions: r.Targets.Conditions, All: r.Targets.All},
		MaxConcurrency: r.MaxConcurrency, MaxErrors: r.MaxErrors,
		ConcurrencyLimit: uint32(r.ConcurrencyLimit), ErrorLimit: uint32(r.ErrorLimit), NotAfterSeconds: int32(r.NotAfterSeconds),
		State: r.State, StateReason: r.StateReason, StateMessage: r.StateMessage,
		WaitingReason: r.WaitingReason, WaitingMessage: r.WaitingMessage,
		Requester: r.Requester, RequestedVia: r.RequestedVia, Reason: r.Reason, BatchId: r.BatchID,
		Counts: &apiv1.FleetRunCounts{
			Targets: uint32(c.Targets), Waiting: uint32(c.ByState[fleetruns.TargetWaiting]), Started: uint32(c.ByState[fleetruns.TargetStarted]),
			Succeeded: uint32(c.ByState[fleetruns.TargetSucceeded]), Failures: uint32(c.Failures()), Cancelled: uint32(c.ByState[fleetruns.TargetCancelled]),
			NotStarted: uint32(c.ByState[fleetruns.TargetNotStarted]), Refused: uint32(c.ByState[fleetruns.TargetRefused]),
			ByState: map[string]uint32{}, ByReason: map[string]uint32{},
		},
		CreatedAt: timestamppb.New(r.CreatedAt), UpdatedAt: timestamppb.New(r.UpdatedAt),
		StartedAt: ts(r.StartedAt), FinishedAt: ts(r.FinishedAt), CancelRequestedAt: ts(r.CancelRequest),
	}
	for k, v := range c.ByState {
		out.Counts.ByState[k] = uint32(v)
	}
	for k, v := range c.ByReason {
		out.Counts.ByReason[k] = uint32(v)
	}
	for _, t := range r.Refused {
		out.Refused = append(out.Refused, targetProto(t))
	}
	return out
}

func targetProto(t fleetruns.Target) *apiv1.FleetRunTarget {
	return &apiv1.FleetRunTarget{NodeId: t.NodeID, Ordinal: uint32(t.Ordinal), State: t.State, CommandId: t.CommandID,
		CommandState: t.CommandState, Reason: t.Reason, Message: t.Message, Pool: t.Pool,
		StartedAt: ts(t.StartedAt), SettledAt: ts(t.SettledAt)}
}
