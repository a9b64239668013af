package reconciler_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/controlplane/commands/kinds"
	"github.com/better-compute/commands/controlplane/fleet/nodespecs"
	"github.com/better-compute/commands/controlplane/modules/modulestest"
	"github.com/better-compute/commands/controlplane/modules/reconciler"
	"github.com/better-compute/commands/controlplane/modules/remediation"
)

type bundle struct {
	ctx    context.Context
	bench  *modulestest.Bench
	rec    *reconciler.Reconciler
	tenant string
	node   string
}

func setup(t *testing.T) (*bundle, func(string, ...any) int) {
	t.Helper()
	t.Parallel()
	rec := reconciler.New(reconciler.Options{})
	bench := modulestest.New(t, modulestest.Options{Kinds: kinds.FirstParty()}, rec)
	ctx, db := bench.Ctx, bench.Pool
	ten := bench.Tenant(t, "acme")
	n := bench.Node(t, modulestest.Node{TenantID: ten})
	count := func(sql string, args ...any) int {
		var c int
		require.NoError(t, db.QueryRow(ctx, sql, args...).Scan(&c))
		return c
	}
	b := &bundle{ctx: ctx, bench: bench, rec: rec, tenant: ten, node: n}
	report := func(conds, inv string) {
		bench.NodeStatus(t, n, json.RawMessage(inv), json.RawMessage(conds))
	}
	report(`[]`, `{"gpus":[{"uuid":"GPU-a","xids":[{"xid":48,"count":1}]}]}`)
	_, err := nodespecs.Set(ctx, db, n, json.RawMessage(`{"holds":[{"gpu":"GPU-a","state":"live","allocation":"a1"}]}`), nil)
	require.NoError(t, err)
	return b, count
}

// "a reboot supersedes a reset on the same node": a reset waiting for its
// GPU's hold is superseded when the node comes to need a reboot.
func TestRebootSupersedesAWaitingReset(t *testing.T) {
	b, count := setup(t)
	require.NoError(t, b.rec.Reconcile(b.ctx))
	require.Equal(t, 1, count(`SELECT count(*) FROM remediations WHERE action = 'gpu.reset' AND state = 'waiting' AND waiting_reason = 'gpu-in-use'`))
	b.bench.NodeStatus(t, b.node, nil, json.RawMessage(`[{"type":"RebootRequired","status":"True","message":"packages wait"}]`))
	require.NoError(t, b.rec.Reconcile(b.ctx))
	require.Equal(t, 1, count(`SELECT count(*) FROM remediations WHERE action = 'gpu.reset' AND state = 'superseded' AND superseded_by LIKE 'health-%'`))
	require.Equal(t, 1, count(`SELECT count(*) FROM remediations WHERE action = 'node.reboot' AND state = 'waiting' AND waiting_reason = 'allocations-live'`),
		"the reboot waits for the live allocation too")
	require.Zero(t, count(`SELECT count(*) FROM commands`))
}

// "N remediations of one node within 7 days escalate to a hardware ticket
// event instead of another try."
func TestFifthRemediationInSevenDaysIsAHardwareTicket(t *testing.T) {
	b, count := setup(t)
	for i := range 5 {
		_, err := b.rec.Engine().Pool().Exec(b.ctx, `INSERT INTO remediations (id, node_id, tenant_id, pool, owner, action, trigger, state, outcome, started_at, finished_at)
			VALUES ($1, $2, $3, 'default', 'health', 'node.reboot', 'RebootRequired', 'done', 'verified', now() - interval '2 days', now() - interval '2 days')`,
			fmt.Sprintf("health-old-%d", i), b.node, b.tenant)
		require.NoError(t, err)
	}
	_, err := nodespecs.Set(b.ctx, b.rec.Engine().Pool(), b.node, json.RawMessage(`{}`), nil)
	require.NoError(t, err)
	require.NoError(t, b.rec.Reconcile(b.ctx))
	require.Equal(t, 1, count(`SELECT count(*) FROM remediations WHERE action = 'gpu.reset' AND state = 'escalated' AND outcome = 'escalated'`))
	require.Equal(t, 1, count(`SELECT count(*) FROM outbox WHERE topic = $1 AND payload->>'nodeId' = $2`, remediation.TopicHardwareTicket, b.node))
	require.Zero(t, count(`SELECT count(*) FROM commands`), "a ticket instead of another try")
	require.NoError(t, b.rec.Reconcile(b.ctx))
	require.Equal(t, 1, count(`SELECT count(*) FROM remediations WHERE action = 'gpu.reset'`), "not planned again")
}
