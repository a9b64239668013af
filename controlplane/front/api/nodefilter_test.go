package api_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/controlplane/internal/errcode"
	apiv1 "github.com/better-compute/commands/proto/bc/api/v1"
)

// nodeIDs lists the ids of one nodes.list page.
func nodeIDs(t *testing.T, nodes apiv1.NodesClient, token string, req *apiv1.ListNodesRequest) []string {
	t.Helper()
	resp, err := nodes.List(as(token), req)
	require.NoError(t, err)
	ids := []string{}
	for _, n := range resp.GetItems() {
		ids = append(ids, n.GetId())
	}
	return ids
}

// "The node list pages and filters on the server (pool, label, condition,
// connected, health, text search)": each filter keeps what it says, they
// combine, Node.healthy says what the health filter keeps, and a wrong
// filter is INVALID_INPUT naming its field.
func TestNodesListFiltersOnTheServer(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	b.createNodes(t, tenantA, "east", "node_e1", "node_e2", "node_e3")
	exec := func(sql string, args ...any) {
		_, err := b.pool.Exec(ctx, sql, args...)
		require.NoError(t, err)
	}
	exec(`UPDATE nodes SET conditions = '[{"type":"RebootRequired","status":"True","reason":"huge-pages"}]' WHERE id = 'node_e1'`)
	exec(`UPDATE nodes SET conditions = '[{"type":"TrustBundle","status":"False","reason":"none"}]', failed_checks = '{row-remap.pending}', checked_at = now() WHERE id = 'node_e2'`)
	exec(`UPDATE nodes SET labels = '{"rack":"R7-west"}', session_epoch = 1, session_opened_at = now(), session_seen_at = now() WHERE id = 'node_e3'`)
	nodes := apiv1.NewNodesClient(b.conn)
	list := func(req *apiv1.ListNodesRequest) []string {
		req.TenantId = tenantA
		return nodeIDs(t, nodes, tokOps, req)
	}
	yes, no := true, false

	require.Equal(t, []string{"node_e1", "node_e2", "node_e3"}, list(&apiv1.ListNodesRequest{Pool: "east"}))
	require.Equal(t, []string{"node_e1"}, list(&apiv1.ListNodesRequest{Condition: "RebootRequired"}))
	require.Equal(t, []string{"node_e2"}, list(&apiv1.ListNodesRequest{FailedCheck: "row-remap.pending"}))
	require.Equal(t, []string{"node_e1", "node_e2"}, list(&apiv1.ListNodesRequest{Pool: "east", Health: "unhealthy"}))
	require.Equal(t, []string{nodeA1, nodeA2, "node_e3", nodeGPU}, list(&apiv1.ListNodesRequest{Health: "healthy"}))
	require.Equal(t, []string{"node_e3"}, list(&apiv1.ListNodesRequest{Connected: &yes}))
	require.NotContains(t, list(&apiv1.ListNodesRequest{Connected: &no}), "node_e3")
	// Text search: in an id, a pool or a label value, case-insensitive; a
	// LIKE wildcard in it is a plain character.
	require.Equal(t, []string{"node_e3"}, list(&apiv1.ListNodesRequest{Query: "r7-WEST"}))
	require.Equal(t, []string{"node_e1", "node_e2", "node_e3"}, list(&apiv1.ListNodesRequest{Query: "EAST"}))
	require.Equal(t, []string{"node_a1", "node_a2"}, list(&apiv1.ListNodesRequest{Query: "node_a"}))
	require.Empty(t, list(&apiv1.ListNodesRequest{Query: "%"}))
	require.Equal(t, []string{"node_e3"}, list(&apiv1.ListNodesRequest{Query: "e3", Health: "healthy", Connected: &yes, Selector: "rack"}))

	resp, err := nodes.List(as(tokOps), &apiv1.ListNodesRequest{TenantId: tenantA, Pool: "east"})
	require.NoError(t, err)
	healthy := map[string]bool{}
	for _, n := range resp.GetItems() {
		healthy[n.GetId()] = n.GetHealthy()
	}
	require.Equal(t, map[string]bool{"node_e1": false, "node_e2": false, "node_e3": true}, healthy)
	require.Equal(t, []string{"row-remap.pending"}, resp.GetItems()[1].GetFailedChecks())
	require.NotNil(t, resp.GetItems()[1].GetCheckedAt())

	for field, req := range map[string]*apiv1.ListNodesRequest{
		"health":      {TenantId: tenantA, Health: "sick"},
		"condition":   {TenantId: tenantA, Condition: "bad type!"},
		"failedCheck": {TenantId: tenantA, FailedCheck: "a b"},
		"query":       {TenantId: tenantA, Query: string(make([]byte, 201))},
	} {
		_, err := nodes.List(as(tokOps), req)
		requireCode(t, err, errcode.InvalidInput)
		require.ErrorContains(t, err, field, "the error names the field")
	}
}
