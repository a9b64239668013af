package nodes_test

import (
	"context"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/controlplane/commands/kinds"
	"github.com/better-compute/commands/controlplane/commands/queue"
	"github.com/better-compute/commands/controlplane/fleet/labels"
	"github.com/better-compute/commands/controlplane/fleet/nodes"
	"github.com/better-compute/commands/controlplane/internal/storetest"
)

// A node is read as the fleet sees it: Get and List show the tenant's live
// nodes only, List filters and pages by id, TenantOf answers for a deleted
// node too (its history outlives it), and Summarise counts what Get shows.
func TestNodesAreReadAsTheFleetSeesThem(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := storetest.DB(t)
	reg, err := kinds.NewRegistry()
	require.NoError(t, err)
	q := queue.New(reg, hclog.NewNullLogger())
	ten, err := q.CreateTenant(ctx, db, queue.Tenant{Name: "acme"})
	require.NoError(t, err)
	other, err := q.CreateTenant(ctx, db, queue.Tenant{Name: "other"})
	require.NoError(t, err)
	for _, n := range []queue.Node{
		{ID: "node_a", TenantID: ten.ID, Pool: "east"},
		{ID: "node_b", TenantID: ten.ID},
		{ID: "node_c", TenantID: ten.ID, Pool: "east"},
		{ID: "node_x", TenantID: other.ID},
	} {
		_, err := q.CreateNode(ctx, db, n)
		require.NoError(t, err)
	}
	exec := func(sql string, args ...any) {
		_, err := db.Exec(ctx, sql, args...)
		require.NoError(t, err)
	}
	exec(`UPDATE nodes SET labels = '{"rack":"r_7%"}', session_epoch = 1, session_opened_at = now(), session_seen_at = now() WHERE id = 'node_a'`)
	exec(`UPDATE nodes SET conditions = '[{"type":"RebootRequired","status":"True"}]', failed_checks = '{row-remap.pending}' WHERE id = 'node_b'`)
	exec(`UPDATE nodes SET deleted_at = now() WHERE id = 'node_c'`)

	a, err := nodes.Get(ctx, db, ten.ID, "node_a")
	require.NoError(t, err)
	require.Equal(t, "east", a.Pool)
	require.True(t, a.Connected)
	require.True(t, a.Healthy)
	require.JSONEq(t, `{"rack":"r_7%"}`, string(a.Labels))
	b, err := nodes.Get(ctx, db, ten.ID, "node_b")
	require.NoError(t, err)
	require.False(t, b.Healthy)
	require.Equal(t, []string{"row-remap.pending"}, b.FailedChecks)
	for _, id := range []string{"node_c", "node_x", "node_none"} {
		_, err := nodes.Get(ctx, db, ten.ID, id)
		require.ErrorIs(t, err, nodes.ErrNotFound, id)
	}

	ids := func(f nodes.Filter, after string, limit int) []string {
		rs, err := nodes.List(ctx, db, ten.ID, f, after, limit)
		require.NoError(t, err)
		out := []string{}
		for _, r := range rs {
			out = append(out, r.ID)
		}
		return out
	}
	yes, no := true, false
	require.Equal(t, []string{"node_a", "node_b"}, ids(nodes.Filter{}, "", 10))
	require.Equal(t, []string{"node_b"}, ids(nodes.Filter{}, "node_a", 10))
	require.Equal(t, []string{"node_a"}, ids(nodes.Filter{}, "", 1))
	require.Equal(t, []string{"node_a"}, ids(nodes.Filter{Pool: "east"}, "", 10))
	require.Equal(t, []string{"node_a"}, ids(nodes.Filter{Connected: &yes}, "", 10))
	require.Equal(t, []string{"node_b"}, ids(nodes.Filter{Healthy: &no}, "", 10))
	require.Equal(t, []string{"node_b"}, ids(nodes.Filter{Condition: "RebootRequired"}, "", 10))
	require.Equal(t, []string{"node_b"}, ids(nodes.Filter{FailedCheck: "row-remap.pending"}, "", 10))
	sel, err := labels.Parse("rack")
	require.NoError(t, err)
	require.Equal(t, []string{"node_a"}, ids(nodes.Filter{Selector: sel}, "", 10))
	// A LIKE wildcard in the text search is a plain character.
	require.Equal(t, []string{"node_a"}, ids(nodes.Filter{Query: "R_7%"}, "", 10))
	require.Empty(t, ids(nodes.Filter{Query: "r%7"}, "", 10))

	for id, want := range map[string]string{"node_a": ten.ID, "node_c": ten.ID, "node_x": other.ID} {
		got, ok, err := nodes.TenantOf(ctx, db, id)
		require.NoError(t, err)
		require.True(t, ok, id)
		require.Equal(t, want, got, id)
	}
	_, ok, err := nodes.TenantOf(ctx, db, "node_none")
	require.NoError(t, err)
	require.False(t, ok)

	sum, err := nodes.Summarise(ctx, db, ten.ID, nil)
	require.NoError(t, err)
	require.Equal(t, nodes.Summary{Nodes: 2, Connected: 1, Unhealthy: 1,
		Pools:         []nodes.PoolCount{{Pool: "default", Nodes: 1, Unhealthy: 1}, {Pool: "east", Nodes: 1, Connected: 1}},
		ByCondition:   []nodes.NameCount{{Name: "RebootRequired", Nodes: 1}},
		ByFailedCheck: []nodes.NameCount{{Name: "row-remap.pending", Nodes: 1}},
	}, sum)
	// The patterns of a caller's grants narrow the counts.
	sum, err = nodes.Summarise(ctx, db, ten.ID, []string{"compute-node/node\\_a"})
	require.NoError(t, err)
	require.Equal(t, int64(1), sum.Nodes)
	require.Empty(t, sum.ByCondition)
}
