package api_test

import (
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/better-compute/commands/controlplane/commands/fleetruns"
	"github.com/better-compute/commands/controlplane/front/api"
	"github.com/better-compute/commands/controlplane/internal/errcode"
	apiv1 "github.com/better-compute/commands/proto/bc/api/v1"
)

// Labels are set, changed and removed through nodes.setLabels (validated,
// compute:nodes:admin), shown on the node, and select nodes in nodes.list;
// a selector that does not parse is INVALID_INPUT naming it.
func TestNodeLabelsSetShowAndSelect(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createNodes(t, tenantA, "", "node_gpu2", "node_h")
	nodes := apiv1.NewNodesClient(b.conn)
	n, err := nodes.SetLabels(as(tokOps), &apiv1.SetNodeLabelsRequest{TenantId: tenantA, NodeId: nodeGPU, Labels: map[string]string{"gpu": "h200", "rack": "r1"}})
	require.NoError(t, err)
	require.Equal(t, map[string]string{"gpu": "h200", "rack": "r1"}, n.GetLabels())
	n, err = nodes.SetLabels(as(tokOps), &apiv1.SetNodeLabelsRequest{TenantId: tenantA, NodeId: nodeGPU, Labels: map[string]string{"rack": "r2"}, Remove: []string{"gpu"}})
	require.NoError(t, err)
	require.Equal(t, map[string]string{"rack": "r2"}, n.GetLabels())
	_, err = nodes.SetLabels(as(tokOps), &apiv1.SetNodeLabelsRequest{TenantId: tenantA, NodeId: "node_gpu2", Labels: map[string]string{"gpu": "h200", "rack": "r1"}})
	require.NoError(t, err)

	_, err = nodes.SetLabels(as(tokOps), &apiv1.SetNodeLabelsRequest{TenantId: tenantA, NodeId: nodeGPU, Labels: map[string]string{"bad key": "x"}})
	requireCode(t, err, errcode.InvalidInput)
	require.ErrorContains(t, err, `label key "bad key"`)
	_, err = nodes.SetLabels(as(tokReader), &apiv1.SetNodeLabelsRequest{TenantId: tenantA, NodeId: nodeGPU, Labels: map[string]string{"a": "b"}})
	requireCode(t, err, errcode.PermissionDenied)
	_, err = nodes.SetLabels(as(tokOther), &apiv1.SetNodeLabelsRequest{TenantId: tenantA, NodeId: nodeGPU, Labels: map[string]string{"a": "b"}})
	requireCode(t, err, errcode.NotFound)

	resp, err := nodes.List(as(tokOps), &apiv1.ListNodesRequest{TenantId: tenantA, Selector: "rack in (r1,r2)"})
	require.NoError(t, err)
	var ids []string
	for _, n := range resp.GetItems() {
		ids = append(ids, n.GetId())
	}
	require.Equal(t, []string{nodeGPU, "node_gpu2"}, ids)
	resp, err = nodes.List(as(tokOps), &apiv1.ListNodesRequest{TenantId: tenantA, Selector: "rack=r1,gpu=h200"})
	require.NoError(t, err)
	require.Len(t, resp.GetItems(), 1)
	_, err = nodes.List(as(tokOps), &apiv1.ListNodesRequest{TenantId: tenantA, Selector: "rack in (r1"})
	requireCode(t, err, errcode.InvalidInput)
	require.ErrorContains(t, err, "'(' without ')'")
}

// commands.list without a node lists the tenant's commands on the nodes the
// caller may read, newest first, filtered; commands.get takes an id alone;
// each command says who asked.
func TestCommandsListAcrossTheTenant(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createNodes(t, tenantA, "", "node_gpu2", "node_h")
	cmds := apiv1.NewCommandsClient(b.conn)
	var ids []string
	for _, node := range []string{nodeGPU, "node_gpu2", "node_h"} {
		c, err := cmds.Run(as(tokOps), &apiv1.RunCommandRequest{TenantId: tenantA, NodeId: node, Kind: "inventory.refresh", Payload: &structpb.Struct{}})
		require.NoError(t, err)
		require.Equal(t, "ops", c.GetRequester())
		require.Equal(t, "api", c.GetRequestedVia())
		ids = append(ids, c.GetId())
	}
	all, err := cmds.List(as(tokOps), &apiv1.ListCommandsRequest{TenantId: tenantA})
	require.NoError(t, err)
	require.Len(t, all.GetItems(), 3)
	require.Equal(t, ids[2], all.GetItems()[0].GetId(), "newest first")
	narrow, err := cmds.List(as(tokNarrow), &apiv1.ListCommandsRequest{TenantId: tenantA})
	require.NoError(t, err)
	require.Len(t, narrow.GetItems(), 2, "only the nodes the caller may read (compute-node/node_gpu*)")
	for _, c := range narrow.GetItems() {
		require.Contains(t, []string{nodeGPU, "node_gpu2"}, c.GetNodeId())
	}
	one := int32(1)
	page, err := cmds.List(as(tokOps), &apiv1.ListCommandsRequest{TenantId: tenantA, Limit: &one})
	require.NoError(t, err)
	require.NotEmpty(t, page.GetNextCursor())
	page2, err := cmds.List(as(tokOps), &apiv1.ListCommandsRequest{TenantId: tenantA, Limit: &one, Cursor: page.GetNextCursor()})
	require.NoError(t, err)
	require.Equal(t, ids[1], page2.GetItems()[0].GetId())
	byReq, err := cmds.List(as(tokOps), &apiv1.ListCommandsRequest{TenantId: tenantA, Requester: "someone-else"})
	require.NoError(t, err)
	require.Empty(t, byReq.GetItems())
	_, err = cmds.List(as(tokOps), &apiv1.ListCommandsRequest{TenantId: tenantA, State: "broken"})
	requireCode(t, err, errcode.InvalidInput)

	got, err := cmds.Get(as(tokOps), &apiv1.GetCommandRequest{TenantId: tenantA, CommandId: ids[2]})
	require.NoError(t, err)
	require.Equal(t, "node_h", got.GetNodeId())
	_, err = cmds.Get(as(tokNarrow), &apiv1.GetCommandRequest{TenantId: tenantA, CommandId: ids[2]})
	requireCode(t, err, errcode.PermissionDenied)
	_, err = cmds.Get(as(tokOther), &apiv1.GetCommandRequest{TenantId: tenantA, CommandId: ids[2]})
	requireCode(t, err, errcode.NotFound)
}

// A fleet run's events name no node; they reach the run's requester and
// the holders of compute:runs:read, and no other watcher of the tenant
// (narrow reads node_gpu* only and created no run). fleetRuns.list gives a
// caller without compute:runs:read its own runs, with full pages.
func TestFleetRunEventsAndListReachOnlyWhoMayReadTheRun(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *api.Config) { c.FleetRuns = fleetruns.New(c.Pool, c.Queue, fleetruns.Options{}) })
	runs := apiv1.NewFleetRunsClient(b.conn)
	run, err := runs.Create(as(tokOps), &apiv1.CreateFleetRunRequest{TenantId: tenantA, Kind: "diag.nvml",
		Targets: &apiv1.FleetRunTargets{NodeIds: []string{nodeA1}}})
	require.NoError(t, err)
	require.Equal(t, "ops", run.GetRequester())
	narrow, err := runs.Create(as(tokNarrow), &apiv1.CreateFleetRunRequest{TenantId: tenantA, Kind: "diag.nvml",
		Targets: &apiv1.FleetRunTargets{NodeIds: []string{nodeGPU}}})
	require.NoError(t, err)

	events := apiv1.NewEventsClient(b.conn)
	stream, err := events.Watch(as(tokNarrow), &apiv1.WatchEventsRequest{TenantId: tenantA, Types: []string{"fleet.run.created"}})
	require.NoError(t, err)
	e := recv(t, stream, 1)[0]
	require.Equal(t, narrow.GetId(), e.GetData().GetFields()["runId"].GetStringValue(), "narrow sees its own run's event, not ops'")
	stream, err = events.Watch(as(tokAdmin), &apiv1.WatchEventsRequest{TenantId: tenantA, Types: []string{"fleet.run.created"}})
	require.NoError(t, err)
	got := recv(t, stream, 2)
	require.Equal(t, run.GetId(), got[0].GetData().GetFields()["runId"].GetStringValue(), "compute:runs:read sees every run's")

	one := int32(1)
	page, err := runs.List(as(tokNarrow), &apiv1.ListFleetRunsRequest{TenantId: tenantA, Limit: &one})
	require.NoError(t, err)
	require.Len(t, page.GetItems(), 1)
	require.Equal(t, narrow.GetId(), page.GetItems()[0].GetId())
	require.Empty(t, page.GetNextCursor(), "its own runs only, filtered before paging")
	_, err = runs.Get(as(tokNarrow), &apiv1.GetFleetRunRequest{TenantId: tenantA, RunId: run.GetId()})
	requireCode(t, err, errcode.PermissionDenied)
	_, err = runs.Get(as(tokOther), &apiv1.GetFleetRunRequest{TenantId: tenantA, RunId: run.GetId()})
	requireCode(t, err, errcode.NotFound)
}

// A fleet run of logs.collect, as commands.run, never lets the caller pick
// the upload's destination or cap: the server presigns one per node.
func TestFleetRunOfLogsCollectRefusesACallersDestination(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *api.Config) { c.FleetRuns = fleetruns.New(c.Pool, c.Queue, fleetruns.Options{}) })
	runs := apiv1.NewFleetRunsClient(b.conn)
	evil, err := structpb.NewStruct(map[string]any{"uploadUrl": "https://attacker.example/put"})
	require.NoError(t, err)
	_, err = runs.Create(as(tokOps), &apiv1.CreateFleetRunRequest{TenantId: tenantA, Kind: "logs.collect", Payload: evil,
		Targets: &apiv1.FleetRunTargets{NodeIds: []string{nodeA1}}})
	requireCode(t, err, errcode.InvalidInput)
	require.ErrorContains(t, err, "uploadUrl")
	run, err := runs.Create(as(tokOps), &apiv1.CreateFleetRunRequest{TenantId: tenantA, Kind: "logs.collect",
		Targets: &apiv1.FleetRunTargets{NodeIds: []string{nodeA1}}})
	require.NoError(t, err, "without a destination of its own it is accepted")
	require.Equal(t, uint32(1), run.GetCounts().GetTargets())
}
