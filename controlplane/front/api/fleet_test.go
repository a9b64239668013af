package api_test

import (
	"context"
	"encoding/json"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/better-compute/commands/controlplane/commands/queue"
	"github.com/better-compute/commands/controlplane/internal/errcode"
	apiv1 "github.com/better-compute/commands/proto/bc/api/v1"
)

// "A fleet overview: how many nodes are connected, healthy, unhealthy (by
// condition and by failed check), in each pool; the commands that failed
// in the last hour": fleet.summary counts what the caller reads, and a
// narrow identity's counts leave out the nodes it may not read.
func TestFleetSummaryCountsWhatTheCallerReads(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	b.createNodes(t, tenantA, "east", "node_gpu2", "node_e1")
	exec := func(sql string, args ...any) {
		_, err := b.pool.Exec(ctx, sql, args...)
		require.NoError(t, err)
	}
	exec(`UPDATE nodes SET conditions = '[{"type":"RebootRequired","status":"True"},{"type":"TrustBundle","status":"True"}]' WHERE id = 'node_gpu2'`)
	exec(`UPDATE nodes SET failed_checks = '{row-remap.pending,ecc.uncorrectable}', checked_at = now() WHERE id = $1`, nodeGPU)
	exec(`UPDATE nodes SET failed_checks = '{row-remap.pending}', checked_at = now(), session_epoch = 1, session_opened_at = now(), session_seen_at = now() WHERE id = 'node_e1'`)
	// One command failed in the last hour on node_a1, one succeeded.
	failed, err := b.run(t, tokOps, &apiv1.RunCommandRequest{TenantId: tenantA, NodeId: nodeA1, Kind: "inventory.refresh", Payload: &structpb.Struct{}})
	require.NoError(t, err)
	b.setState(t, failed.GetId(), queue.Failed)
	ok, err := b.run(t, tokOps, &apiv1.RunCommandRequest{TenantId: tenantA, NodeId: nodeA2, Kind: "inventory.refresh", Payload: &structpb.Struct{}})
	require.NoError(t, err)
	b.setState(t, ok.GetId(), queue.Succeeded)

	fleet := apiv1.NewFleetClient(b.conn)
	s, err := fleet.Summary(as(tokOps), &apiv1.FleetSummaryRequest{TenantId: tenantA})
	require.NoError(t, err)
	require.EqualValues(t, 5, s.GetNodes()) // a1, a2, gpu1, gpu2, e1
	require.EqualValues(t, 1, s.GetConnected())
	require.EqualValues(t, 3, s.GetUnhealthy())
	require.EqualValues(t, 2, s.GetHealthy())
	require.Equal(t, []string{"row-remap.pending:2", "ecc.uncorrectable:1"}, counts(s.GetByFailedCheck()))
	require.Equal(t, []string{"RebootRequired:1"}, counts(s.GetByCondition()), "a condition that is good news (TrustBundle True) is not a problem to count")
	pools := map[string][3]int64{}
	for _, p := range s.GetPools() {
		pools[p.GetPool()] = [3]int64{p.GetNodes(), p.GetConnected(), p.GetUnhealthy()}
	}
	require.Equal(t, map[string][3]int64{"default": {3, 0, 1}, "east": {2, 1, 2}}, pools)
	require.EqualValues(t, 1, s.GetFailedLastHour())
	require.False(t, s.GetCommandSigning(), "this test server signs nothing")
	require.EqualValues(t, 0, s.GetApprovalThreshold())
	require.NotNil(t, s.GetAsOf())

	// narrow reads compute-node/node_gpu* only: gpu1 and gpu2, and none of
	// the failures (node_a1's).
	s, err = fleet.Summary(as(tokNarrow), &apiv1.FleetSummaryRequest{TenantId: tenantA})
	require.NoError(t, err)
	require.EqualValues(t, 2, s.GetNodes())
	require.EqualValues(t, 2, s.GetUnhealthy())
	require.EqualValues(t, 0, s.GetFailedLastHour())

	_, err = fleet.Summary(as(tokOther), &apiv1.FleetSummaryRequest{TenantId: tenantA})
	requireCode(t, err, errcode.NotFound)
	_, err = fleet.Summary(as(tokOps), &apiv1.FleetSummaryRequest{})
	requireCode(t, err, errcode.InvalidInput)
}

func counts(cs []*apiv1.NodeCount) []string {
	out := []string{}
	for _, c := range cs {
		out = append(out, c.GetName()+":"+strconv.FormatInt(c.GetNodes(), 10))
	}
	return out
}

// kinds.list shows every registered kind with what a payload form needs
// (its schema) and whether commands.run takes it; apiRunnableOnly keeps the
// allowlisted, API-runnable ones; kinds.get of an unknown kind is NOT_FOUND
// saying where kinds come from.
func TestKindsListAndGet(t *testing.T) {
	t.Parallel()
	b := setup(t)
	k := apiv1.NewKindsClient(b.conn)
	all, err := k.List(as(tokReader), &apiv1.ListKindsRequest{})
	require.NoError(t, err)
	byName := map[string]*apiv1.Kind{}
	for _, x := range all.GetItems() {
		byName[x.GetName()] = x
		require.Len(t, x.GetDigest(), 64, x.GetName())
		require.True(t, x.GetNewest())
		require.Equal(t, "first-party", x.GetSource())
	}
	require.Contains(t, byName, "vendor.blink")
	require.True(t, byName["vendor.blink"].GetApiRunnable())
	require.False(t, byName["vendor.blink"].GetAllowlisted())
	require.True(t, byName["node.reboot"].GetFlags().GetDestructive())
	var schema map[string]any
	require.NoError(t, json.Unmarshal([]byte(byName["inventory.refresh"].GetPayloadSchema()), &schema))
	require.Equal(t, "object", schema["type"])

	runnable, err := k.List(as(tokReader), &apiv1.ListKindsRequest{ApiRunnableOnly: true})
	require.NoError(t, err)
	var names []string
	for _, x := range runnable.GetItems() {
		names = append(names, x.GetName())
	}
	require.Equal(t, []string{"diag.nvml", "inventory.refresh", "logs.collect", "node.reboot"}, names)

	got, err := k.Get(as(tokReader), &apiv1.GetKindRequest{Name: "diag.nvml"})
	require.NoError(t, err)
	require.Equal(t, byName["diag.nvml"].GetDigest(), got.GetDigest())
	_, err = k.Get(as(tokReader), &apiv1.GetKindRequest{Name: "acme.flash"})
	requireCode(t, err, errcode.NotFound)
	require.ErrorContains(t, err, "kindsDir")
	_, err = k.Get(as(tokReader), &apiv1.GetKindRequest{Name: "diag.nvml", Version: "9.9.9"})
	requireCode(t, err, errcode.NotFound)
	_, err = k.List(context.Background(), &apiv1.ListKindsRequest{})
	requireCode(t, err, errcode.Unauthenticated)
}
