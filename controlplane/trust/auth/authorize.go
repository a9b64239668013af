package auth

import (
	"context"
	"strings"

	"github.com/better-compute/commands/controlplane/internal/apierr"
	"github.com/better-compute/commands/controlplane/internal/errcode"
	"github.com/better-compute/commands/internal/names"
)

// CheckID checks a required id of a request against the one id grammar
// (internal/names): a missing or malformed one is INVALID_INPUT naming its
// field. Every id is checked before any lookup, so that no malformed id
// reaches the database, and before visibility, which a malformed id cannot
// have: the answer is the same whoever asks.
func CheckID(field, value string) error {
	if value == "" {
		return apierr.New(errcode.InvalidInput, field+" is required", map[string]string{"field": field})
	}
	if err := names.ID(field, value); err != nil {
		return apierr.New(errcode.InvalidInput, strings.TrimPrefix(err.Error(), names.ErrInvalid.Error()+": "),
			map[string]string{"field": field})
	}
	return nil
}

// NodeLookup returns the tenant that owns a node, and found=false for a node
// that does not exist (or was deleted).
type NodeLookup func(ctx context.Context, nodeID string) (tenantID string, found bool, err error)

// AuthorizeNode checks that the caller in ctx may use permission on the node
// in the request's tenant. The order matters: a tenant the caller does not
// belong to, a node that does not exist, and a node of another tenant are all
// the same NOT_FOUND; only a node the caller sees can be PERMISSION_DENIED.
func AuthorizeNode(ctx context.Context, lookup NodeLookup, tenantID, nodeID, permission string) (*Identity, error) {
	id, ok := FromContext(ctx)
	if !ok {
		return nil, apierr.Errorf(errcode.Unauthenticated, "no authenticated identity")
	}
	if err := CheckID("tenantId", tenantID); err != nil {
		return nil, err
	}
	if err := CheckID("nodeId", nodeID); err != nil {
		return nil, err
	}
	notFound := apierr.New(errcode.NotFound, "node "+nodeID+" not found", map[string]string{"nodeId": nodeID})
	if !id.SeesTenant(tenantID) {
		return nil, notFound
	}
	owner, found, err := lookup(ctx, nodeID)
	if err != nil {
		return nil, err
	}
	if !found || owner != tenantID {
		return nil, notFound
	}
	if !id.Allowed(permission, NodeResource(nodeID)) {
		return nil, Denied(permission, NodeResource(nodeID))
	}
	return id, nil
}

// Denied is PERMISSION_DENIED for a caller without permission on resource:
// the one answer every check gives, naming both.
func Denied(permission, resource string) error {
	return apierr.New(errcode.PermissionDenied, "missing "+permission+" on "+resource,
		map[string]string{"permission": permission, "resource": resource})
}

// AuthorizeTenant checks permission on a tenant the caller sees; a tenant it
// does not see is NOT_FOUND.
func AuthorizeTenant(ctx context.Context, tenantID, permission string) (*Identity, error) {
	id, ok := FromContext(ctx)
	if !ok {
		return nil, apierr.Errorf(errcode.Unauthenticated, "no authenticated identity")
	}
	if err := CheckID("tenantId", tenantID); err != nil {
		return nil, err
	}
	if !id.SeesTenant(tenantID) {
		return nil, apierr.New(errcode.NotFound, "tenant "+tenantID+" not found", map[string]string{"tenantId": tenantID})
	}
	if !id.Allowed(permission, TenantResource(tenantID)) {
		return nil, Denied(permission, TenantResource(tenantID))
	}
	return id, nil
}
