package api

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/better-compute/commands/controlplane/commands/batches"
	"github.com/better-compute/commands/controlplane/internal/errcode"
	"github.com/better-compute/commands/controlplane/internal/pgtx"

	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/attribute"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/better-compute/commands/controlplane/commands/bundles"
	"github.com/better-compute/commands/controlplane/commands/queue"
	"github.com/better-compute/commands/controlplane/internal/apierr"
	"github.com/better-compute/commands/controlplane/internal/ids"
	"github.com/better-compute/commands/controlplane/trust/auth"
	"github.com/better-compute/commands/internal/tracing"
	apiv1 "github.com/better-compute/commands/proto/bc/api/v1"
	"github.com/better-compute/commands/sdk/kind"
)

type commandsServer struct {
	apiv1.UnimplementedCommandsServer
	s *Server
}

// authorizeRun checks permission for commands.run without a database round
// trip when the caller holds the grant: Enqueue's own tenant check (in its one
// statement) then turns an invisible node into NOT_FOUND. Only a caller
// without the grant costs a lookup, to tell NOT_FOUND (invisible node) from
// PERMISSION_DENIED. Use it only where the next query checks the tenant.
func (s *Server) authorizeRun(ctx context.Context, tenantID, nodeID, permission string) (*auth.Identity, error) {
	id, err := identity(ctx)
	if err != nil {
		return nil, err
	}
	if err := validID("tenantId", tenantID); err != nil {
		return nil, err
	}
	if err := validID("nodeId", nodeID); err != nil {
		return nil, err
	}
	if id.SeesTenant(tenantID) && id.Allowed(permission, auth.NodeResource(nodeID)) {
		return id, nil
	}
	return auth.AuthorizeNode(ctx, s.lookupNode, tenantID, nodeID, permission)
}

// Run queues a command: allowlist, notAfterSeconds bounds, then one enqueue
// transaction whose key is the caller's key scoped to tenant and identity.
func (c *commandsServer) Run(ctx context.Context, req *apiv1.RunCommandRequest) (_ *apiv1.Command, err error) {
	s := c.s
	ctx, span := s.startRunSpan(ctx, req)
	defer func() { endSpan(span, err) }()
	id, err := s.authorizeRun(ctx, req.GetTenantId(), req.GetNodeId(), auth.PermNodesExec)
	if err != nil {
		return nil, err
	}
	if _, err = s.runnable("commands.run does", req.GetKind()); err != nil {
		return nil, err
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
	var payload []byte
	if req.GetPayload() != nil {
		if err := validJSONText("payload", req.GetPayload()); err != nil {
			return nil, err
		}
		if payload, err = protojson.Marshal(req.GetPayload()); err != nil {
			return nil, apierr.New(errcode.InvalidInput, "payload: "+err.Error(), map[string]string{"field": "payload"})
		}
	}
	p := queue.EnqueueParams{
		TenantID: req.GetTenantId(),
		NodeID:   req.GetNodeId(),
		Kind:     req.GetKind(),
		Payload:  payload,
		NotAfter: s.now().Add(time.Duration(secs) * time.Second),
		BatchID:  req.GetBatchId(),
		// Names only: a value never enters a command.
		SecretRefs: req.GetSecretRefs(),
		// Who asked: the authenticated identity, never a field of the
		// request.
		Requester: id.Name, RequestedVia: requestedVia(id),
	}
	if req.GetIdempotencyKey() != "" {
		p.IdempotencyKey = queue.APIKey(req.GetTenantId(), id.Name, req.GetIdempotencyKey())
	}
	if req.GetKind() == logsCollect {
		if err := s.supportBundle(ctx, &p); err != nil {
			return nil, err
		}
	}
	// A bad command is refused before it joins a group (below), where its
	// failure would cost the others a rollback.
	if err := s.queue.Check(p); err != nil {
		return nil, s.fail(ctx, "commands.run", err)
	}
	var cmd queue.Command
	// The command's trace parent is this call's span: the gateway's
	// dispatch and settle spans, and the node's, join it.
	p.TraceParent = tracing.Parent(ctx)
	ectx, enqueueSpan := s.tracer.Start(ctx, SpanEnqueue)
	// Concurrent callers share one transaction's commit; each is answered
	// once it committed, or with its own error (a conflict, a batch scope
	// that does not hold it), never with another caller's.
	if p.BatchID == "" {
		// The group's plain runs go in one EnqueueSet.
		var out queue.EnqueueOutcome
		if out, err = s.runs.Do(ectx, p); err == nil {
			cmd, err = out.Command, out.Err
		}
	} else {
		err = s.group.Do(ectx, func(gctx context.Context, tx pgx.Tx) error {
			q := p // each run of the group starts from the caller's params
			var err error
			// The batch must be the tenant's and its scope must hold this
			// (node, kind), and the payload when the leaf binds one; the
			// leaf must not have another command (a retry with the same
			// idempotency key finds its own).
			if q.AwaitingApproval, err = batches.CheckRun(gctx, tx, q.TenantID, q.BatchID, q.NodeID, q.Kind, canonicalPayload(q.Payload), q.IdempotencyKey, s.now()); err != nil {
				return err
			}
			cmd, _, err = s.queue.Enqueue(gctx, tx, q)
			return err
		})
	}
	endSpan(enqueueSpan, err)
	if err != nil {
		return nil, s.fail(ctx, "commands.run", err)
	}
	s.outage.OK()
	span.SetAttributes(attribute.String("bc.command_id", cmd.ID))
	return s.toProto(cmd), nil
}

// runnable checks a kind as commands.run accepts it (fleet runs take the
// same kinds): named, on the allowlist, registered and API-runnable. who
// starts the refusal's words ("commands.run does").
func (s *Server) runnable(who, k string) (kind.Manifest, error) {
	if k == "" {
		return kind.Manifest{}, invalid("kind", "kind is required")
	}
	if !s.allowlist[k] {
		return kind.Manifest{}, apierr.New(errcode.Unsupported, fmt.Sprintf("%s not accept kind %q", who, k),
			map[string]string{"kind": k, "reason": "not-allowlisted"})
	}
	m, ok := s.queue.Registry().Get(k)
	if !ok {
		// Allowlisted, but no manifest: the registry lacks it (a kind's
		// manifest file missing from kindsDir, or a typo in the allowlist).
		return kind.Manifest{}, apierr.New(errcode.Unsupported,
			fmt.Sprintf("%s not accept kind %q: it is allowlisted but no manifest of it is registered; put its manifest in bc-server's kindsDir and reload bc-server (kinds list shows what is registered)", who, k),
			map[string]string{"kind": k, "reason": "not-registered"})
	}
	if !m.APIRunnable {
		return kind.Manifest{}, apierr.New(errcode.Unsupported,
			fmt.Sprintf("%s not accept kind %q: its manifest (%s) does not set apiRunnable; a module queues it", who, k, m.Version),
			map[string]string{"kind": k, "reason": "not-api-runnable"})
	}
	return m, nil
}

// seesTenant checks a request's tenant id and that the caller sees the
// tenant (NOT_FOUND otherwise, as for a tenant that does not exist).
func seesTenant(id *auth.Identity, tenantID string) error {
	if err := validID("tenantId", tenantID); err != nil {
		return err
	}
	if !id.SeesTenant(tenantID) {
		return apierr.New(errcode.NotFound, "tenant "+tenantID+" not found", map[string]string{"tenantId": tenantID})
	}
	return nil
}

// logsCollect is the kind that uploads a support bundle.
const logsCollect = "logs.collect"

// supportBundle puts a presigned PUT URL for support-bundles/{nodeId}/{key}.bundle
// into a logs.collect command, valid until not_after plus 15 minutes, with
// the byte cap and supportBundle: true; no credential travels in the command.
// The key is the queue's api:… key without its prefix, so a command queued
// without an idempotency key gets a random one (its bundle still needs a
// name). A retry with the same key returns the command already queued, whose
// stored payload keeps the URL it was given: the URL computed here for it is
// dropped unused, and nothing is written to the store by presigning.
func (s *Server) supportBundle(ctx context.Context, p *queue.EnqueueParams) error {
	if s.bundles == nil {
		return apierr.New(errcode.InvalidState, bundles.ErrNoDestination.Error(),
			map[string]string{"kind": logsCollect, "reason": "no-upload-destination"})
	}
	if p.IdempotencyKey == "" {
		p.IdempotencyKey = queue.APIKey(p.TenantID, "", ids.NewCommand())
	}
	key, fields, err := s.bundles.Presign(ctx, p.NodeID, p.IdempotencyKey, p.NotAfter)
	if err != nil {
		return s.fail(ctx, "presigning the support bundle", err)
	}
	merged, err := bundles.MergePayload(p.Payload, key, fields)
	if err != nil {
		// ErrReservedField (the caller picked its own destination or cap)
		// or a payload that is not an object.
		return apierr.New(errcode.InvalidInput, err.Error(), map[string]string{"kind": logsCollect, "field": "payload"})
	}
	p.Payload, p.BundleKey = merged, key
	return nil
}

// Get returns one command of a node the caller may read. Without a node
// id the command id alone finds it in the tenant; the caller still needs
// compute:nodes:read on its node.
func (c *commandsServer) Get(ctx context.Context, req *apiv1.GetCommandRequest) (*apiv1.Command, error) {
	s := c.s
	if req.GetNodeId() == "" {
		return c.getByID(ctx, req)
	}
	if _, err := auth.AuthorizeNode(ctx, s.lookupNodeHistory, req.GetTenantId(), req.GetNodeId(), auth.PermNodesRead); err != nil {
		return nil, err
	}
	if err := validID("commandId", req.GetCommandId()); err != nil {
		return nil, err
	}
	cmd, err := s.queue.Get(ctx, s.pool, req.GetNodeId(), req.GetCommandId())
	if err != nil {
		return nil, s.fail(ctx, "commands.get", err)
	}
	return s.toProto(cmd), nil
}

func (c *commandsServer) getByID(ctx context.Context, req *apiv1.GetCommandRequest) (*apiv1.Command, error) {
	s := c.s
	id, err := identity(ctx)
	if err != nil {
		return nil, err
	}
	if err := validID("tenantId", req.GetTenantId()); err != nil {
		return nil, err
	}
	if err := validID("commandId", req.GetCommandId()); err != nil {
		return nil, err
	}
	if !id.SeesTenant(req.GetTenantId()) {
		return nil, apierr.New(errcode.NotFound, "command "+req.GetCommandId()+" not found", map[string]string{"commandId": req.GetCommandId()})
	}
	cmd, err := s.queue.GetInTenant(ctx, s.pool, req.GetTenantId(), req.GetCommandId())
	if err != nil {
		return nil, s.fail(ctx, "commands.get", err)
	}
	if !id.Allowed(auth.PermNodesRead, auth.NodeResource(cmd.NodeID)) {
		return nil, auth.Denied(auth.PermNodesRead, auth.NodeResource(cmd.NodeID))
	}
	return s.toProto(cmd), nil
}

// List returns a page of a node's commands, newest first by seq; without a
// node id, a page of the tenant's commands on the nodes the caller may
// read, newest first by creation, with the filters the request names.
func (c *commandsServer) List(ctx context.Context, req *apiv1.ListCommandsRequest) (*apiv1.ListCommandsResponse, error) {
	s := c.s
	var (
		items []queue.Command
		next  string
		err   error
	)
	if req.GetNodeId() == "" || tenantFilters(req) {
		items, next, err = c.listTenant(ctx, req)
		if err != nil {
			return nil, err
		}
	} else {
		if _, err := auth.AuthorizeNode(ctx, s.lookupNodeHistory, req.GetTenantId(), req.GetNodeId(), auth.PermNodesRead); err != nil {
			return nil, err
		}
		items, next, err = s.queue.List(ctx, s.pool, queue.ListParams{
			TenantID: req.GetTenantId(),
			NodeID:   req.GetNodeId(),
			State:    queue.State(req.GetState()),
			Limit:    int(req.GetLimit()),
			Cursor:   req.GetCursor(),
		})
		if err != nil {
			return nil, s.fail(ctx, "commands.list", err)
		}
	}
	out := &apiv1.ListCommandsResponse{Items: make([]*apiv1.Command, len(items)), NextCursor: next}
	for i, cmd := range items {
		out.Items[i] = s.toProto(cmd)
	}
	return out, nil
}

// tenantFilters reports whether a node's list asks for a filter that only
// the tenant's list has (kind, reason, run, batch, requester, time): it is
// then the tenant's list kept to that node.
func tenantFilters(req *apiv1.ListCommandsRequest) bool {
	return req.GetKind() != "" || req.GetReason() != "" || req.GetRunId() != "" || req.GetBatchId() != "" ||
		req.GetRequester() != "" || req.GetSince() != nil || req.GetUntil() != nil || req.GetSettledSince() != nil
}

func (c *commandsServer) listTenant(ctx context.Context, req *apiv1.ListCommandsRequest) ([]queue.Command, string, error) {
	s := c.s
	id, err := identity(ctx)
	if err != nil {
		return nil, "", err
	}
	if err := seesTenant(id, req.GetTenantId()); err != nil {
		return nil, "", err
	}
	if req.GetNodeId() != "" {
		if _, err := auth.AuthorizeNode(ctx, s.lookupNodeHistory, req.GetTenantId(), req.GetNodeId(), auth.PermNodesRead); err != nil {
			return nil, "", err
		}
	}
	for field, v := range map[string]string{"runId": req.GetRunId(), "batchId": req.GetBatchId()} {
		if v != "" {
			if err := validID(field, v); err != nil {
				return nil, "", err
			}
		}
	}
	p := queue.TenantListParams{
		TenantID:     req.GetTenantId(),
		NodePatterns: id.ResourcePatterns(auth.PermNodesRead, "compute-node/"),
		NodeID:       req.GetNodeId(),
		State:        queue.State(req.GetState()),
		Kind:         req.GetKind(),
		Reason:       req.GetReason(),
		RunID:        req.GetRunId(),
		BatchID:      req.GetBatchId(),
		Requester:    req.GetRequester(),
		Limit:        int(req.GetLimit()),
		Cursor:       req.GetCursor(),
	}
	if req.GetSince() != nil {
		p.Since = req.GetSince().AsTime()
	}
	if req.GetUntil() != nil {
		p.Until = req.GetUntil().AsTime()
	}
	if req.GetSettledSince() != nil {
		p.SettledSince = req.GetSettledSince().AsTime()
	}
	items, next, err := s.queue.ListTenant(ctx, s.pool, p)
	if err != nil {
		return nil, "", s.fail(ctx, "commands.list", err)
	}
	return items, next, nil
}

// requestedVia says how an identity asks: an agent principal (the MCP
// server's) through mcp, every other identity through the api.
func requestedVia(id *auth.Identity) string {
	if id.Agent {
		return queue.ViaMCP
	}
	return queue.ViaAPI
}

// Cancel cancels a command (pending: at once; in flight: requested;
// terminal: unchanged) and returns it.
func (c *commandsServer) Cancel(ctx context.Context, req *apiv1.CancelCommandRequest) (*apiv1.Command, error) {
	s := c.s
	// No grant shortcut here: queue.Cancel does not check the tenant, so the
	// node's owner is read before anything changes.
	if _, err := auth.AuthorizeNode(ctx, s.lookupNode, req.GetTenantId(), req.GetNodeId(), auth.PermNodesExec); err != nil {
		return nil, err
	}
	if err := validID("commandId", req.GetCommandId()); err != nil {
		return nil, err
	}
	var cmd queue.Command
	err := pgtx.InTx(ctx, s.pool, func(tx pgx.Tx) error {
		var err error
		cmd, err = s.queue.Cancel(ctx, tx, req.GetNodeId(), req.GetCommandId())
		return err
	})
	if err != nil {
		return nil, s.fail(ctx, "commands.cancel", err)
	}
	s.outage.OK()
	return s.toProto(cmd), nil
}

// canonicalPayload is the payload as a batch leaf's digest covers it ("{}"
// for none): trust.PayloadDigest canonicalises the JSON itself.
func canonicalPayload(p []byte) []byte {
	if len(p) == 0 {
		return []byte("{}")
	}
	return p
}
