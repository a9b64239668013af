package metal

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/jackc/pgx/v5"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/better-compute/commands/controlplane/commands/batches"
	"github.com/better-compute/commands/controlplane/internal/apierr"
	"github.com/better-compute/commands/controlplane/internal/dbhealth"
	"github.com/better-compute/commands/controlplane/internal/errcode"
	"github.com/better-compute/commands/controlplane/internal/ids"
	"github.com/better-compute/commands/controlplane/modules"
	"github.com/better-compute/commands/controlplane/trust/auth"
	apiv1 "github.com/better-compute/commands/proto/bc/api/v1"
)

// Service is bc.api.v1.Metal.
type Service struct {
	apiv1.UnimplementedMetalServer
	// Context is the metal module's own, as the module host loaded it
	// (Host.Context("metal")): the database, and the command queue through
	// the module API.
	Context *modules.Context
	// Quorum returns the approver keys and threshold now (they reload).
	Quorum func() batches.Quorum
	Now    func() time.Time
	Logger hclog.Logger
}

// Register adds the Metal service to g.
func (s *Service) Register(g grpc.ServiceRegistrar) { apiv1.RegisterMetalServer(g, s) }

func (s *Service) now() time.Time {
	if s.Now == nil {
		return time.Now()
	}
	return s.Now()
}

func (s *Service) quorum() batches.Quorum {
	if s.Quorum == nil {
		return batches.Quorum{}
	}
	return s.Quorum()
}

func (s *Service) lookupNode(ctx context.Context, nodeID string) (string, bool, error) {
	tenantID, err := s.Context.NodeTenant(ctx, s.Context.Pool(), nodeID)
	if errcode.CodeOf(err) == errcode.NotFound {
		return "", false, nil
	}
	if err != nil {
		return "", false, s.fail(ctx, "looking up node", err)
	}
	return tenantID, true, nil
}

// authorizeStart checks compute:nodes:exec on the site node (the commands
// run there) and compute:batches:create on the tenant (the run creates
// its batch).
func (s *Service) authorizeStart(ctx context.Context, tenantID, siteNodeID string) (*auth.Identity, error) {
	if _, err := auth.AuthorizeNode(ctx, s.lookupNode, tenantID, siteNodeID, auth.PermNodesExec); err != nil {
		return nil, err
	}
	return auth.AuthorizeTenant(ctx, tenantID, auth.PermBatchesCreate)
}

func deadline(secs *uint32) time.Duration {
	if secs == nil {
		return 0
	}
	return time.Duration(*secs) * time.Second
}

// Power runs metal.power.
func (s *Service) Power(ctx context.Context, req *apiv1.MetalPowerRequest) (*apiv1.MetalRun, error) {
	id, err := s.authorizeStart(ctx, req.GetTenantId(), req.GetSiteNodeId())
	if err != nil {
		return nil, err
	}
	steps, err := PowerSteps(req.GetMachines(), req.GetAction())
	if err != nil {
		return nil, s.fail(ctx, "metal.power", err)
	}
	return s.start(ctx, StartParams{TenantID: req.GetTenantId(), Requester: id.Name, IdempotencyKey: req.GetIdempotencyKey(),
		Workflow: WorkflowPower, SiteNodeID: req.GetSiteNodeId(), Reason: req.GetReason(), Steps: steps, Deadline: deadline(req.DeadlineSeconds),
		SecretRefs: req.GetSecretRefs()})
}

// Bulk runs metal.bulk.
func (s *Service) Bulk(ctx context.Context, req *apiv1.MetalBulkRequest) (*apiv1.MetalRun, error) {
	id, err := s.authorizeStart(ctx, req.GetTenantId(), req.GetSiteNodeId())
	if err != nil {
		return nil, err
	}
	var steps []Step
	for _, st := range req.GetSteps() {
		var payload []byte
		if st.GetPayload() != nil {
			if payload, err = protojson.Marshal(st.GetPayload()); err != nil {
				return nil, apierr.New(errcode.InvalidInput, "steps: payload: "+err.Error(), map[string]string{"field": "steps"})
			}
		}
		step, err := BulkStep(st.GetMachine(), st.GetKind(), payload)
		if err != nil {
			return nil, s.fail(ctx, "metal.bulk", err)
		}
		steps = append(steps, step)
	}
	return s.start(ctx, StartParams{TenantID: req.GetTenantId(), Requester: id.Name, IdempotencyKey: req.GetIdempotencyKey(),
		Workflow: WorkflowBulk, SiteNodeID: req.GetSiteNodeId(), Reason: req.GetReason(), Steps: steps, Deadline: deadline(req.DeadlineSeconds),
		SecretRefs: req.GetSecretRefs()})
}

func (s *Service) start(ctx context.Context, p StartParams) (*apiv1.MetalRun, error) {
	var run Run
	var dup bool
	err := pgx.BeginFunc(ctx, s.Context.Pool(), func(tx pgx.Tx) error {
		var err error
		run, dup, err = Start(ctx, tx, s.Context.Commands(), s.quorum(), p, s.now())
		return err
	})
	if err != nil {
		return nil, s.fail(ctx, p.Workflow, err)
	}
	if !dup {
		s.Logger.Info("metal run started", "run_id", run.ID, "workflow", run.Workflow, "site_node_id", run.SiteNodeID, "batch_id", run.BatchID, "machines", len(run.Steps), "requester", run.Requester)
	}
	rep, err := Get(ctx, s.Context.Pool(), s.Context.Commands(), run.TenantID, run.ID)
	if err != nil {
		return nil, s.fail(ctx, p.Workflow, err)
	}
	return reportProto(rep), nil
}

// GetRun reports a run per machine.
func (s *Service) GetRun(ctx context.Context, req *apiv1.GetMetalRunRequest) (*apiv1.MetalRun, error) {
	if err := auth.CheckID("tenantId", req.GetTenantId()); err != nil {
		return nil, err
	}
	if err := auth.CheckID("runId", req.GetRunId()); err != nil {
		return nil, err
	}
	rep, err := Get(ctx, s.Context.Pool(), s.Context.Commands(), req.GetTenantId(), req.GetRunId())
	if err != nil {
		return nil, s.fail(ctx, "metal.getRun", err)
	}
	// A caller who may not read the site node's commands cannot see the
	// run: the same NOT_FOUND as a run that does not exist.
	if _, err := auth.AuthorizeNode(ctx, s.lookupNode, req.GetTenantId(), rep.SiteNodeID, auth.PermNodesRead); err != nil {
		if apierr.CodeOf(err) == errcode.PermissionDenied || apierr.CodeOf(err) == errcode.NotFound {
			return nil, s.fail(ctx, "metal.getRun", NotFound(req.GetRunId()))
		}
		return nil, err
	}
	return reportProto(rep), nil
}

func reportProto(r Report) *apiv1.MetalRun {
	out := &apiv1.MetalRun{Id: r.ID, TenantId: r.TenantID, Workflow: r.Workflow, SiteNodeId: r.SiteNodeID, BatchId: r.BatchID,
		Reason: r.Reason, Requester: r.Requester, State: r.State, BatchState: r.BatchState, ApprovalsNeeded: uint32(r.ApprovalsNeeded),
		CreatedAt: timestamppb.New(r.CreatedAt)}
	for _, m := range r.Machines {
		pm := &apiv1.MetalMachine{Machine: m.Machine, Seq: uint32(m.Seq), Kind: m.Kind, CommandId: m.CommandID, State: m.State, Reason: m.Reason,
			Message: m.Message, AwaitingApproval: m.AwaitingApproval}
		if len(m.Result) > 0 {
			var v map[string]any
			if json.Unmarshal(m.Result, &v) == nil {
				pm.Result, _ = structpb.NewStruct(v)
			}
		}
		out.Machines = append(out.Machines, pm)
	}
	return out
}

// fail turns an error into an API status: a refusal keeps its code, reason
// and details; a lost database is UNAVAILABLE; anything else is INTERNAL
// with an error id the log has too.
func (s *Service) fail(ctx context.Context, op string, err error) error {
	if _, ok := status.FromError(err); ok {
		return err
	}
	var qe *errcode.Error
	if errors.As(err, &qe) {
		details := map[string]string{}
		for k, v := range qe.Details {
			details[k] = v
		}
		if _, set := details["reason"]; !set && qe.Reason != "" {
			details["reason"] = qe.Reason
		}
		return apierr.New(errcode.Code(qe.Code), qe.Message, details)
	}
	if ctx.Err() != nil {
		return status.FromContextError(ctx.Err()).Err()
	}
	if dbhealth.Unreachable(err) {
		return apierr.New(errcode.Unavailable, op+": the database is unavailable; retry", nil)
	}
	errID := ids.New("err_")
	s.Logger.Error("internal error", "op", op, "error_id", errID, "error", err)
	return apierr.New(errcode.Internal, op+": internal error (error id "+errID+"; the server log has it)", map[string]string{"errorId": errID})
}
