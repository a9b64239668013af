package remediation_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/controlplane/commands/kinds"
	"github.com/better-compute/commands/controlplane/fleet/nodespecs"
	"github.com/better-compute/commands/controlplane/fleet/pools"
	"github.com/better-compute/commands/controlplane/modules"
	"github.com/better-compute/commands/controlplane/modules/modulestest"
	"github.com/better-compute/commands/controlplane/modules/remediation"
)

const gpu1 = "GPU-1f2e3d4c-5b6a-7988-a7b6-c5d4e3f2a1b0"

type bundle struct {
	ctx    context.Context
	pool   *pgxpool.Pool
	bench  *modulestest.Bench
	prov   *remediation.Provision
	tenant string
	node   string
}

func inventory(pending bool) string {
	return fmt.Sprintf(`{"gpus":[{"uuid":"GPU-0","remappedRows":{"pending":false}},{"uuid":%q,"remappedRows":{"pending":%v,"uncorrectable":1}}]}`, gpu1, pending)
}

func setup(t *testing.T) *bundle {
	t.Helper()
	t.Parallel()
	prov := remediation.NewProvision(remediation.ProvisionOptions{})
	bench := modulestest.New(t, modulestest.Options{Kinds: kinds.FirstParty()}, prov)
	ten := bench.Tenant(t, "acme")
	n := bench.Node(t, modulestest.Node{TenantID: ten, Pool: "gpu-a"})
	b := &bundle{ctx: bench.Ctx, pool: bench.Pool, bench: bench, prov: prov, tenant: ten, node: n}
	b.report(t, inventory(true))
	return b
}

// report stores what the node's NodeStatus says (the gateway's path), which
// also marks its session seen.
func (b *bundle) report(t *testing.T, inv string) {
	t.Helper()
	b.bench.NodeStatus(t, b.node, json.RawMessage(inv), json.RawMessage(`[]`))
}

func (b *bundle) spec(t *testing.T, spec string) {
	t.Helper()
	_, err := nodespecs.Set(b.ctx, b.pool, b.node, json.RawMessage(spec), nil)
	require.NoError(t, err)
}

func (b *bundle) plan(t *testing.T) []remediation.Row {
	t.Helper()
	require.NoError(t, b.prov.Reconcile(b.ctx))
	rows, err := remediation.List(b.ctx, b.pool, remediation.ListParams{TenantID: b.tenant, IncludeFinished: true})
	require.NoError(t, err)
	return rows
}

func (b *bundle) commands(t *testing.T) []modules.StoredCommand {
	t.Helper()
	cs, _, err := b.bench.Commands(t, b.prov.Name()).List(b.ctx, b.pool, modules.ListParams{NodeID: b.node})
	require.NoError(t, err)
	return cs
}

func (b *bundle) settle(t *testing.T, id string, result string) {
	t.Helper()
	var res json.RawMessage
	if result != "" {
		res = json.RawMessage(result)
	}
	_, changed := b.bench.Report(t, modulestest.Report{CommandID: id, NodeID: b.node, To: modules.StateSucceeded, Result: res})
	require.True(t, changed)
}

func (b *bundle) topics(t *testing.T) []string {
	t.Helper()
	rows, err := b.pool.Query(b.ctx, `SELECT topic FROM outbox WHERE topic LIKE 'remediation.%' ORDER BY id`)
	require.NoError(t, err)
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return out
}

// "A GPU with RowRemapPending on a node: once no allocation is live on that
// GPU (no hold names it or its MIG instances or slots, and no VM has it
// passed through), queue gpu.reset for it under a platform batch whose leaf
// names the node and kind, within the pool's budget; after the reset, check
// the fresh inventory shows the condition cleared".
func TestProvisionResetsOnceNoAllocationIsLiveAndVerifies(t *testing.T) {
	b := setup(t)
	for _, spec := range []string{
		`{"holds":[{"gpu":"` + gpu1 + `","state":"live","allocation":"alloc-1"}]}`,
		`{"holds":[{"gpu":"` + gpu1 + `","mig":"MIG-1","state":"live","allocation":"alloc-2"}]}`,
		`{"instances":[{"name":"vm-1","passthroughGpus":["` + gpu1 + `"]}]}`,
	} {
		b.spec(t, spec)
		rows := b.plan(t)
		require.Len(t, rows, 1)
		require.Equal(t, remediation.StateWaiting, rows[0].State)
		require.Equal(t, remediation.WaitGPUInUse, rows[0].WaitingReason, rows[0].WaitingMessage)
		require.Contains(t, rows[0].WaitingMessage, gpu1)
		require.Empty(t, b.commands(t), "nothing is sent while an allocation is live")
	}
	b.spec(t, `{"holds":[{"gpu":"`+gpu1+`","state":"released","allocation":"alloc-1"}]}`)
	rows := b.plan(t)
	require.Equal(t, remediation.StateRunning, rows[0].State)
	cs := b.commands(t)
	require.Len(t, cs, 1)
	reset := cs[0]
	require.Equal(t, "gpu.reset", reset.Kind)
	require.JSONEq(t, `{"gpus":["`+gpu1+`"]}`, string(reset.Payload))
	require.Equal(t, rows[0].BatchID, reset.BatchID)
	require.Equal(t, modules.StepKey(rows[0].ID, "gpu.reset", 1), reset.IdempotencyKey)
	var requester, scope string
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT requester, scope::text FROM command_batches WHERE id = $1`, reset.BatchID).Scan(&requester, &scope))
	require.Equal(t, "platform:provision", requester)
	require.JSONEq(t, `[{"subject":"`+b.node+`","kind":"gpu.reset"}]`, scope, "the leaf names the node and kind")
	locks, err := pools.ListLocks(b.ctx, b.pool, b.tenant, "gpu-a")
	require.NoError(t, err)
	require.Len(t, locks, 1, "the node's maintenance lock is held while the reset runs")

	// The node reports the reset; the settle wakes the remediation (here
	// the pass does what the waker does), which asks for a fresh inventory.
	b.settle(t, reset.ID, `{"gpus":[{"uuid":"`+gpu1+`","reset":"ok","healthy":true}]}`)
	rows = b.plan(t)
	require.Equal(t, remediation.StateVerifying, rows[0].State)
	cs = b.commands(t)
	require.Len(t, cs, 2)
	require.Equal(t, "inventory.refresh", cs[0].Kind)
	b.report(t, inventory(false))
	b.settle(t, cs[0].ID, inventory(false))
	rows = b.plan(t)
	require.Len(t, rows, 1, "the cleared GPU is not planned again")
	require.Equal(t, remediation.StateDone, rows[0].State)
	require.Equal(t, remediation.OutcomeVerified, rows[0].Outcome)
	locks, err = pools.ListLocks(b.ctx, b.pool, b.tenant, "")
	require.NoError(t, err)
	require.Empty(t, locks)
	require.Equal(t, []string{remediation.TopicPlanned, remediation.TopicWaiting, remediation.TopicStarted, remediation.TopicVerifying, remediation.TopicFinished}, b.topics(t),
		"one remediation.waiting for the reason gpu-in-use, however its words changed")
	var wakes int
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT count(*) FROM river_job WHERE args->>'key' LIKE 'wf:provision-%'`).Scan(&wakes))
	require.Equal(t, 2, wakes, "each settle recorded its owner's wake")
}

// "if it did not, escalate (a node condition and an event) instead of
// resetting again".
func TestProvisionEscalatesWhenTheResetDidNotClearIt(t *testing.T) {
	b := setup(t)
	rows := b.plan(t)
	require.Equal(t, remediation.StateRunning, rows[0].State)
	b.settle(t, b.commands(t)[0].ID, "")
	b.plan(t)
	b.settle(t, b.commands(t)[0].ID, inventory(true))
	rows = b.plan(t)
	require.Len(t, rows, 1, "no second reset")
	require.Equal(t, remediation.StateEscalated, rows[0].State)
	require.Contains(t, rows[0].OutcomeMessage, "escalated instead of resetting again")
	require.Contains(t, b.topics(t), remediation.TopicEscalated)
	conds, err := remediation.NodeConditions(b.ctx, b.pool, b.node)
	require.NoError(t, err)
	require.Len(t, conds, 1)
	require.Equal(t, remediation.ConditionEscalated, conds[0].Type)
	require.Equal(t, "True", conds[0].Status)
	require.Contains(t, conds[0].Message, gpu1)
	require.Len(t, b.commands(t), 2, "the reset and its verification only")
	// Stays escalated across passes.
	rows = b.plan(t)
	require.Len(t, rows, 1)
}

// Issue 35: "a reset whose GPU stays unhealthy escalates": a gpu.reset that
// ran but reports the GPU still unhealthy (gpu-unhealthy) escalates, with
// the event and the node condition, instead of failing and being tried
// again; any other failure of the reset fails the remediation.
func TestProvisionEscalatesWhenTheResetReportsTheGPUStillUnhealthy(t *testing.T) {
	b := setup(t)
	rows := b.plan(t)
	require.Equal(t, remediation.StateRunning, rows[0].State)
	_, changed := b.bench.Report(t, modulestest.Report{CommandID: b.commands(t)[0].ID, NodeID: b.node, To: modules.StateFailed,
		Reason: remediation.ReasonGPUUnhealthy, Message: "reset, but still unhealthy (power-cycle the node or replace the GPU): " + gpu1 + ": a row remap is still pending"})
	require.True(t, changed)
	rows = b.plan(t)
	require.Len(t, rows, 1, "no second reset")
	require.Equal(t, remediation.StateEscalated, rows[0].State)
	require.Equal(t, remediation.OutcomeFailed, rows[0].Outcome, "it counts towards the breaker")
	require.Contains(t, rows[0].OutcomeMessage, "stays unhealthy")
	require.Contains(t, b.topics(t), remediation.TopicEscalated)
	conds, err := remediation.NodeConditions(b.ctx, b.pool, b.node)
	require.NoError(t, err)
	require.Len(t, conds, 1)
	require.Equal(t, remediation.ConditionEscalated, conds[0].Type)
	require.Len(t, b.commands(t), 1, "the reset only: nothing to verify")
}

// A stale session keeps the reset waiting, saying so; a session seen again
// lets it go.
func TestProvisionSkipsAStaleSession(t *testing.T) {
	b := setup(t)
	_, err := b.pool.Exec(b.ctx, `UPDATE nodes SET session_seen_at = now() - interval '1 hour' WHERE id = $1`, b.node)
	require.NoError(t, err)
	rows := b.plan(t)
	require.Equal(t, remediation.WaitSessionStale, rows[0].WaitingReason)
	require.Contains(t, rows[0].WaitingMessage, "stale")
	require.Empty(t, b.commands(t))
	b.report(t, inventory(true))
	rows = b.plan(t)
	require.Equal(t, remediation.StateRunning, rows[0].State)
	_ = time.Second
}
