package auth_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/controlplane/internal/apierr"
	"github.com/better-compute/commands/controlplane/internal/errcode"
	"github.com/better-compute/commands/controlplane/trust/auth"
)

func TestAuthorizeNodeVisibilityBeforePermission(t *testing.T) {
	t.Parallel()
	nodes := map[string]string{"node_mine": "tenant_a", "node_theirs": "tenant_b"}
	lookup := func(_ context.Context, id string) (string, bool, error) {
		tenant, ok := nodes[id]
		return tenant, ok, nil
	}
	reader := &auth.Identity{Name: "reader", Tenants: []string{"tenant_a"},
		Grants: []auth.Grant{{Permission: auth.PermNodesRead, Resource: "compute-node/*"}}}
	ctx := auth.NewContext(context.Background(), reader)

	_, err := auth.AuthorizeNode(ctx, lookup, "tenant_a", "node_mine", auth.PermNodesRead)
	require.NoError(t, err)

	_, err = auth.AuthorizeNode(ctx, lookup, "tenant_a", "node_mine", auth.PermNodesExec)
	require.True(t, apierr.Is(err, errcode.PermissionDenied), "missing grant on a visible node: %v", err)

	for _, c := range []struct{ tenant, node string }{
		{"tenant_a", "node_theirs"}, // another tenant's node, through our tenant
		{"tenant_b", "node_theirs"}, // a tenant we do not belong to
		{"tenant_a", "node_nowhere"},
	} {
		for _, perm := range []string{auth.PermNodesRead, auth.PermNodesExec} {
			_, err = auth.AuthorizeNode(ctx, lookup, c.tenant, c.node, perm)
			require.True(t, apierr.Is(err, errcode.NotFound), "%v %s: never PERMISSION_DENIED: %v", c, perm, err)
		}
	}

	_, err = auth.AuthorizeNode(context.Background(), lookup, "tenant_a", "node_mine", auth.PermNodesRead)
	require.True(t, apierr.Is(err, errcode.Unauthenticated))
	_, err = auth.AuthorizeNode(ctx, lookup, "", "node_mine", auth.PermNodesRead)
	require.True(t, apierr.Is(err, errcode.InvalidInput))
}

func TestAuthorizeTenant(t *testing.T) {
	t.Parallel()
	admin := &auth.Identity{Name: "admin", Tenants: []string{"*"},
		Grants: []auth.Grant{{Permission: auth.PermTenantsCreate, Resource: "tenant/*"}}}
	ctx := auth.NewContext(context.Background(), admin)
	_, err := auth.AuthorizeTenant(ctx, "tenant_new", auth.PermTenantsCreate)
	require.NoError(t, err)
	_, err = auth.AuthorizeTenant(ctx, "tenant_new", auth.PermNodesCreate)
	require.True(t, apierr.Is(err, errcode.PermissionDenied))
}
