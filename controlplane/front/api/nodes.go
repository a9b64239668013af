package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/better-compute/commands/controlplane/commands/queue"
	"github.com/better-compute/commands/controlplane/fleet/nodes"
	"github.com/better-compute/commands/controlplane/internal/apierr"
	"github.com/better-compute/commands/controlplane/internal/errcode"
	"github.com/better-compute/commands/controlplane/internal/ids"
	"github.com/better-compute/commands/controlplane/modules/remediation"
	"github.com/better-compute/commands/controlplane/trust/auth"
	apiv1 "github.com/better-compute/commands/proto/bc/api/v1"
)

type nodesServer struct {
	apiv1.UnimplementedNodesServer
	s *Server
}

// condition is a node condition as the nodes.conditions column holds it.
type condition struct {
	Type    string    `json:"type"`
	Status  string    `json:"status"`
	Reason  string    `json:"reason"`
	Message string    `json:"message"`
	Since   time.Time `json:"since"`
}

// Get returns a node with its inventory, conditions and session.
func (n *nodesServer) Get(ctx context.Context, req *apiv1.GetNodeRequest) (*apiv1.Node, error) {
	s := n.s
	if _, err := auth.AuthorizeNode(ctx, s.lookupNode, req.GetTenantId(), req.GetNodeId(), auth.PermNodesRead); err != nil {
		return nil, err
	}
	r, err := nodes.Get(ctx, s.pool, req.GetTenantId(), req.GetNodeId())
	if errors.Is(err, nodes.ErrNotFound) {
		return nil, apierr.New(errcode.NotFound, "node "+req.GetNodeId()+" not found", map[string]string{"nodeId": req.GetNodeId()})
	}
	if err != nil {
		return nil, s.fail(ctx, "nodes.get", err)
	}
	row, err := nodeRowOf(r)
	if err != nil {
		return nil, s.fail(ctx, "nodes.get", err)
	}
	s.outage.OK()
	out, err := s.nodeProto(ctx, row)
	if err != nil {
		return nil, s.fail(ctx, "nodes.get", err)
	}
	return out, nil
}

// nodeRow is a node as the API shows it so far (its plain columns, labels
// and last Hello) and the fleet's row it came from, whose inventory,
// conditions and session times nodeProtoWith adds.
type nodeRow struct {
	node *apiv1.Node
	row  nodes.Row
}

// nodeRowOf shows the row's plain columns, its labels and what its last
// Hello reported as the API's node; nodeProtoWith completes it.
func nodeRowOf(r nodes.Row) (nodeRow, error) {
	out := &apiv1.Node{Id: r.ID, TenantId: r.TenantID, Role: r.Role, AllowedKinds: r.AllowedKinds, AppliedGeneration: r.AppliedGeneration,
		CreatedAt: timestamppb.New(r.CreatedAt), TrustVersion: r.TrustVersion, Pool: r.Pool, SessionEpoch: r.SessionEpoch, Gateway: r.Gateway,
		AgentVersion: r.DaemonVersion, BootId: r.BootID, Connected: r.Connected, FailedChecks: r.FailedChecks, CheckedAt: ts(r.CheckedAt),
		Healthy: r.Healthy}
	if err := helloProto(out, r.HelloKinds, r.RefusedPlugins); err != nil {
		return nodeRow{}, err
	}
	if len(r.Labels) > 2 { // not "{}"
		if err := json.Unmarshal(r.Labels, &out.Labels); err != nil {
			return nodeRow{}, fmt.Errorf("decoding the labels of %s: %w", out.Id, err)
		}
	}
	return nodeRow{node: out, row: r}, nil
}

// nodeProto completes a node row: inventory, its conditions with the
// control plane's and the platform's own, and the session's times.
func (s *Server) nodeProto(ctx context.Context, x nodeRow) (*apiv1.Node, error) {
	// The platform adds its own: a reset that did not clear its GPU's
	// condition, a node remediated too often (RemediationEscalated), a
	// report that contradicted a stored outcome (UpgradeRolledBack,
	// ReportContradicted).
	rc, err := platformConditions(ctx, s.pool, []string{x.node.GetId()})
	if err != nil {
		return nil, err
	}
	return nodeProtoWith(x, rc[x.node.GetId()]), nil
}

// nodeProtoWith is a node as the API shows it, with its remediation
// conditions rc read beforehand (one statement for a whole nodes.list page).
func nodeProtoWith(x nodeRow, rc []remediation.Condition) *apiv1.Node {
	out := x.node
	out.Inventory = toStruct(x.row.Inventory)
	out.ConnectedSince = ts(x.row.SessionOpenedAt)
	out.DisconnectedAt = ts(x.row.SessionClosedAt)
	out.LastSeen = ts(x.row.SessionSeenAt)
	var cs []condition
	if len(x.row.Conditions) > 0 && json.Unmarshal(x.row.Conditions, &cs) == nil {
		for _, c := range cs {
			pc := &apiv1.Condition{Type: c.Type, Status: c.Status, Reason: c.Reason, Message: c.Message}
			if !c.Since.IsZero() {
				pc.Since = timestamppb.New(c.Since)
			}
			out.Conditions = append(out.Conditions, pc)
		}
	}
	if c := kindsCondition(x.row.KindMismatches); c != nil {
		out.Conditions = append(out.Conditions, c)
	}
	for _, c := range rc {
		out.Conditions = append(out.Conditions, &apiv1.Condition{Type: c.Type, Status: c.Status, Reason: c.Reason, Message: c.Message, Since: timestamppb.New(c.Since)})
	}
	return out
}

// CreateTenant registers a tenant (compute:tenants:create on tenant/{id}).
func (n *nodesServer) CreateTenant(ctx context.Context, req *apiv1.CreateTenantRequest) (*apiv1.Tenant, error) {
	s := n.s
	tenantID := req.GetTenantId()
	if tenantID == "" {
		tenantID = ids.NewTenant()
	}
	if _, err := auth.AuthorizeTenant(ctx, tenantID, auth.PermTenantsCreate); err != nil {
		return nil, err
	}
	if err := validName("name", req.GetName()); err != nil {
		return nil, err
	}
	t, err := s.queue.CreateTenant(ctx, s.pool, queue.Tenant{ID: tenantID, Name: req.GetName()})
	if err != nil {
		return nil, s.fail(ctx, "nodes.createTenant", err)
	}
	s.outage.OK()
	return &apiv1.Tenant{Id: t.ID, Name: t.Name, CreatedAt: timestamppb.New(t.CreatedAt)}, nil
}

// Create registers a node (compute:nodes:create on compute-node/{nodeId}).
// Node ids are unique across tenants, since a certificate names the node
// alone; an id that another tenant's node holds, or that a deleted node
// held, is CONFLICT node-id-unavailable, which says neither whose it is nor
// whether it is live. Only a live node of the caller's own tenant, which
// nodes.get shows anyway, is CONFLICT node-exists.
func (n *nodesServer) Create(ctx context.Context, req *apiv1.CreateNodeRequest) (*apiv1.Node, error) {
	s := n.s
	id, err := identity(ctx)
	if err != nil {
		return nil, err
	}
	if err := validID("tenantId", req.GetTenantId()); err != nil {
		return nil, err
	}
	if err := validOptionalID("nodeId", req.GetNodeId()); err != nil {
		return nil, err
	}
	if err := validRole("role", req.GetRole()); err != nil {
		return nil, err
	}
	if err := validKinds("allowedKinds", req.GetAllowedKinds()); err != nil {
		return nil, err
	}
	if req.GetPool() != "" {
		if err := validID("pool", req.GetPool()); err != nil {
			return nil, err
		}
	}
	nodeID := req.GetNodeId()
	if nodeID == "" {
		nodeID = ids.NewNode()
	}
	if !id.SeesTenant(req.GetTenantId()) {
		return nil, apierr.New(errcode.NotFound, "tenant "+req.GetTenantId()+" not found", map[string]string{"tenantId": req.GetTenantId()})
	}
	if !id.Allowed(auth.PermNodesCreate, auth.NodeResource(nodeID)) {
		return nil, auth.Denied(auth.PermNodesCreate, auth.NodeResource(nodeID))
	}
	var allowed []string
	if req.GetAllowedKinds() != nil {
		allowed = req.GetAllowedKinds()
	}
	node, err := s.queue.CreateNode(ctx, s.pool, queue.Node{ID: nodeID, TenantID: req.GetTenantId(), Role: req.GetRole(), AllowedKinds: allowed, Pool: req.GetPool()})
	if errors.Is(err, &errcode.Error{Code: errcode.Conflict, Reason: "node-exists"}) {
		return nil, s.nodeIDTaken(ctx, req.GetTenantId(), nodeID)
	}
	if err != nil {
		return nil, s.fail(ctx, "nodes.create", err)
	}
	s.outage.OK()
	return &apiv1.Node{Id: node.ID, TenantId: node.TenantID, Role: node.Role, AllowedKinds: node.AllowedKinds,
		AppliedGeneration: node.AppliedGeneration, CreatedAt: timestamppb.New(node.CreatedAt), Pool: node.Pool}, nil
}

// ConditionKindsMatchRegistry is the control plane's own condition of a
// node: False while a kind the node runs has another manifest than the
// registry's, whose commands are then held (waitingReason kind-mismatch).
const ConditionKindsMatchRegistry = "KindsMatchRegistry"

// kindsCondition reads the node's kind mismatches (from its last Hello) as
// a condition; nil when the node never reported any.
func kindsCondition(b []byte) *apiv1.Condition {
	if len(b) == 0 {
		return nil
	}
	var ms []queue.KindMismatch
	if json.Unmarshal(b, &ms) != nil || len(ms) == 0 {
		return nil
	}
	var parts []string
	for _, m := range ms {
		short := func(d string) string { return d[:min(12, len(d))] }
		parts = append(parts, fmt.Sprintf("%s: node %s, registry %s (%s)", m.Kind, short(m.NodeDigest), short(m.RegistryDigest), m.RegistryVer))
	}
	return &apiv1.Condition{Type: ConditionKindsMatchRegistry, Status: "False", Reason: "kind-mismatch",
		Message: "the node runs other manifests than the registry; their commands wait: " + strings.Join(parts, "; ")}
}

// nodeIDTaken answers nodes.create for an id that a node already has:
// node-exists when it is the caller's tenant's live node, else
// node-id-unavailable, the same whether another tenant has it or a deleted
// node had it.
func (s *Server) nodeIDTaken(ctx context.Context, tenantID, nodeID string) error {
	_, err := s.queue.GetNode(ctx, s.pool, tenantID, nodeID)
	switch {
	case err == nil:
		return apierr.New(errcode.Conflict, "node "+nodeID+" already exists", map[string]string{"reason": "node-exists", "nodeId": nodeID})
	case errcode.CodeOf(err) == errcode.NotFound:
		return apierr.New(errcode.Conflict, "node id "+nodeID+" is not available: choose another, or leave nodeId empty for one the server chooses",
			map[string]string{"reason": "node-id-unavailable", "nodeId": nodeID})
	}
	return s.fail(ctx, "nodes.create", err)
}

// helloProto fills in the kinds and refused plugins the node's last Hello
// reported (both null before its first Hello since migration 0120).
func helloProto(out *apiv1.Node, kindsJSON, refusedJSON []byte) error {
	if len(kindsJSON) > 0 {
		var ks []queue.HelloKind
		if err := json.Unmarshal(kindsJSON, &ks); err != nil {
			return fmt.Errorf("decoding the kinds of %s: %w", out.Id, err)
		}
		for _, k := range ks {
			out.Kinds = append(out.Kinds, &apiv1.NodeKind{Kind: k.Kind, Version: k.Version, Digest: k.Digest, Status: k.Status, RegistryVersion: k.RegistryVersion})
		}
	}
	if len(refusedJSON) > 0 {
		var rs []queue.RefusedPlugin
		if err := json.Unmarshal(refusedJSON, &rs); err != nil {
			return fmt.Errorf("decoding the refused plugins of %s: %w", out.Id, err)
		}
		for _, r := range rs {
			out.RefusedPlugins = append(out.RefusedPlugins, &apiv1.PluginRefusal{Plugin: r.Plugin, Reason: r.Reason, Message: r.Message,
				PinnedSha256: r.PinnedSHA256, FoundSha256: r.FoundSHA256, Kinds: r.Kinds})
		}
	}
	return nil
}
