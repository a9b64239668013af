package metal_test

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/controlplane/commands/batches"
	"github.com/better-compute/commands/controlplane/commands/kinds"
	"github.com/better-compute/commands/controlplane/commands/wakes"
	"github.com/better-compute/commands/controlplane/internal/errcode"
	"github.com/better-compute/commands/controlplane/modules"
	"github.com/better-compute/commands/controlplane/modules/metal"
	"github.com/better-compute/commands/controlplane/modules/modulestest"
	"github.com/better-compute/commands/internal/trust"
	"github.com/jackc/pgx/v5/pgxpool"
)

type env struct {
	ctx        context.Context
	pool       *pgxpool.Pool
	bench      *modulestest.Bench
	mod        *metal.Module
	cmds       modules.Commands
	tenant     string
	site, node string
	quorum     batches.Quorum
}

func setup(t *testing.T) *env {
	t.Helper()
	t.Parallel()
	mod := &metal.Module{}
	b := modulestest.New(t, modulestest.Options{Kinds: append(kinds.FirstParty(), metal.Manifests()...)}, mod)
	ten := b.Tenant(t, "acme")
	site := b.Node(t, modulestest.Node{TenantID: ten, Role: "site"})
	n := b.Node(t, modulestest.Node{TenantID: ten})
	pub, _, err := trust.NewEd25519()
	require.NoError(t, err)
	return &env{ctx: b.Ctx, pool: b.Pool, bench: b, mod: mod, cmds: b.Commands(t, "metal"), tenant: ten, site: site, node: n,
		quorum: batches.Quorum{Approvers: []trust.Approver{{Name: "alice", PublicKey: pub}}, Threshold: 1}}
}

func (e *env) start(t *testing.T, p metal.StartParams) (metal.Run, bool, error) {
	t.Helper()
	if p.TenantID == "" {
		p.TenantID = e.tenant
	}
	if p.SiteNodeID == "" {
		p.SiteNodeID = e.site
	}
	if p.Requester == "" {
		p.Requester = "ops"
	}
	if p.Reason == "" {
		p.Reason = "rack 4"
	}
	var run metal.Run
	var dup bool
	err := pgx.BeginFunc(e.ctx, e.pool, func(tx pgx.Tx) error {
		var err error
		run, dup, err = metal.Start(e.ctx, tx, e.cmds, e.quorum, p, time.Now())
		return err
	})
	return run, dup, err
}

func power(t *testing.T, action string, machines ...string) []metal.Step {
	s, err := metal.PowerSteps(machines, action)
	require.NoError(t, err)
	return s
}

// "metal.power ... creates its own batch whose leaves name each machine,
// goes through the quorum, and reports per machine."
func TestPowerCreatesItsBatchAndHoldsEveryMachine(t *testing.T) {
	e := setup(t)
	run, dup, err := e.start(t, metal.StartParams{Workflow: metal.WorkflowPower, Steps: power(t, "cycle", "m1", "m2", "m3"), IdempotencyKey: "k",
		SecretRefs: []string{"rack4-admin"}})
	require.NoError(t, err)
	require.False(t, dup)
	require.Equal(t, []string{"rack4-admin"}, run.SecretRefs)
	require.Len(t, run.Steps, 3)
	b, err := batches.Get(e.ctx, e.pool, e.tenant, run.BatchID)
	require.NoError(t, err)
	require.Equal(t, batches.StateAwaiting, b.State)
	require.Len(t, b.Scope, 3)
	for i, s := range run.Steps {
		c, err := e.cmds.Get(e.ctx, e.pool, e.site, s.CommandID)
		require.NoError(t, err)
		require.Equal(t, modules.StatePending, c.State)
		require.True(t, c.AwaitingApproval)
		require.Equal(t, run.BatchID, c.BatchID)
		require.Equal(t, "bmc.power", c.Kind)
		require.Equal(t, []string{"rack4-admin"}, modulestest.SecretRefsOf(c), "the command names the BMC credential, never its value")
		var p map[string]string
		require.NoError(t, json.Unmarshal(c.Payload, &p))
		require.Equal(t, map[string]string{"bmc": s.Machine, "action": "cycle"}, p)
		// The leaf binds the exact payload the node will hash.
		require.Equal(t, batches.Leaf{Subject: e.site, Kind: "bmc.power", PayloadSHA256: hex.EncodeToString(trust.PayloadDigest(c.Payload))}, b.Scope[i])
		ok, err := batches.CheckScope(e.ctx, e.pool, e.tenant, run.BatchID, e.site, "bmc.power", c.Payload, time.Now())
		require.NoError(t, err)
		require.True(t, ok)
	}
	// Another payload (another machine) is not in the scope.
	_, err = batches.CheckScope(e.ctx, e.pool, e.tenant, run.BatchID, e.site, "bmc.power", []byte(`{"bmc":"m4","action":"cycle"}`), time.Now())
	require.ErrorContains(t, err, "holds no leaf")

	rep, err := metal.Get(e.ctx, e.pool, e.cmds, e.tenant, run.ID)
	require.NoError(t, err)
	require.Equal(t, metal.StateAwaitingApproval, rep.State)
	require.Equal(t, 1, rep.ApprovalsNeeded)
	require.Len(t, rep.Machines, 3)
	require.Equal(t, "m1", rep.Machines[0].Machine)

	again, dup, err := e.start(t, metal.StartParams{Workflow: metal.WorkflowPower, Steps: power(t, "cycle", "m1", "m2", "m3"), IdempotencyKey: "k"})
	require.NoError(t, err)
	require.True(t, dup)
	require.Equal(t, run.ID, again.ID)

	_, err = metal.Get(e.ctx, e.pool, e.cmds, "tenant_other", run.ID)
	require.Equal(t, errcode.NotFound, errcode.CodeOf(err))
}

// Without approver keys the batch is recorded for audit and the commands
// go at once.
func TestWithoutAQuorumTheCommandsGoAtOnce(t *testing.T) {
	e := setup(t)
	e.quorum = batches.Quorum{}
	run, _, err := e.start(t, metal.StartParams{Workflow: metal.WorkflowPower, Steps: power(t, "on", "m1")})
	require.NoError(t, err)
	c, err := e.cmds.Get(e.ctx, e.pool, e.site, run.Steps[0].CommandID)
	require.NoError(t, err)
	require.False(t, c.AwaitingApproval)
	rep, err := metal.Get(e.ctx, e.pool, e.cmds, e.tenant, run.ID)
	require.NoError(t, err)
	require.Equal(t, metal.StateRunning, rep.State)
	require.Equal(t, batches.StateRecorded, rep.BatchState)
}

func TestRefusalsLeaveNothingBehind(t *testing.T) {
	e := setup(t)
	// The BMC kinds run on a site agent: not on the machine's own node.
	_, _, err := e.start(t, metal.StartParams{Workflow: metal.WorkflowPower, SiteNodeID: e.node, Steps: power(t, "off", "m1")})
	require.Equal(t, errcode.InvalidState, errcode.CodeOf(err))
	require.ErrorContains(t, err, "runs only on role site")

	_, _, err = e.start(t, metal.StartParams{Workflow: metal.WorkflowPower, Steps: power(t, "off", "m1", "m1")})
	require.ErrorContains(t, err, "machine m1 is listed twice")
	// A later step the kind's schema refuses refuses the whole run, though
	// it would be queued only later.
	ok, err := metal.BulkStep("m1", "bmc.boot", json.RawMessage(`{"device":"pxe"}`))
	require.NoError(t, err)
	bad, err := metal.BulkStep("m1", "bmc.power", json.RawMessage(`{"action":"explode"}`))
	require.NoError(t, err)
	_, _, err = e.start(t, metal.StartParams{Workflow: metal.WorkflowBulk, Steps: []metal.Step{ok, bad}})
	require.ErrorContains(t, err, "payload of bmc.power: field /action")
	_, _, err = e.start(t, metal.StartParams{Workflow: metal.WorkflowPower, Steps: power(t, "off", "../etc")})
	require.ErrorContains(t, err, `machine "../etc"`)
	_, err = metal.PowerSteps([]string{"m1"}, "explode")
	require.ErrorContains(t, err, "must be one of on, off, soft, cycle, reset")
	_, _, err = e.start(t, metal.StartParams{Workflow: metal.WorkflowPower})
	require.ErrorContains(t, err, "needs 1 to 1000 machines")

	var n int
	require.NoError(t, e.pool.QueryRow(e.ctx, `SELECT (SELECT count(*) FROM metal_runs) + (SELECT count(*) FROM command_batches) + (SELECT count(*) FROM commands)`).Scan(&n))
	require.Zero(t, n, "a refused run stores no run, batch or command")
}

func TestBulkSteps(t *testing.T) {
	e := setup(t)
	boot, err := metal.BulkStep("m1", "bmc.boot", json.RawMessage(`{"device":"pxe"}`))
	require.NoError(t, err)
	require.JSONEq(t, `{"bmc":"m1","device":"pxe"}`, string(boot.Payload))
	on, err := metal.BulkStep("m2", "bmc.power", json.RawMessage(`{"action":"on"}`))
	require.NoError(t, err)
	run, _, err := e.start(t, metal.StartParams{Workflow: metal.WorkflowBulk, Steps: []metal.Step{boot, on}})
	require.NoError(t, err)
	require.Len(t, run.Steps, 2)

	_, err = metal.BulkStep("m1", "node.reboot", nil)
	require.ErrorContains(t, err, "metal.bulk runs bmc.power and bmc.boot")
	_, err = metal.BulkStep("m1", "bmc.boot", json.RawMessage(`{"bmc":"m9","device":"pxe"}`))
	require.ErrorContains(t, err, "payload names bmc m9")
	// The kind's schema still applies.
	bad, err := metal.BulkStep("m3", "bmc.boot", json.RawMessage(`{"device":"floppy"}`))
	require.NoError(t, err)
	_, _, err = e.start(t, metal.StartParams{Workflow: metal.WorkflowBulk, Steps: []metal.Step{bad}})
	require.Equal(t, errcode.InvalidInput, errcode.CodeOf(err))
	require.ErrorContains(t, err, "machine m3")
}

// metal.bulk runs a sequence per machine: the first step at once, the next
// when the module is woken by the first's success; a failed step skips the
// machine's rest. Wakes come at least once: a second wake changes nothing.
func TestBulkRunsASequencePerMachine(t *testing.T) {
	e := setup(t)
	e.quorum = batches.Quorum{}
	step := func(m, k, p string) metal.Step {
		s, err := metal.BulkStep(m, k, json.RawMessage(p))
		require.NoError(t, err)
		return s
	}
	run, _, err := e.start(t, metal.StartParams{Workflow: metal.WorkflowBulk, Steps: []metal.Step{
		step("m1", "bmc.boot", `{"device":"pxe"}`), step("m1", "bmc.power", `{"action":"cycle"}`),
		step("m2", "bmc.boot", `{"device":"pxe"}`), step("m2", "bmc.power", `{"action":"cycle"}`),
	}})
	require.NoError(t, err)
	b, err := batches.Get(e.ctx, e.pool, e.tenant, run.BatchID)
	require.NoError(t, err)
	require.Len(t, b.Scope, 4, "the batch covers every step, so it is approved once")
	rep, err := metal.Get(e.ctx, e.pool, e.cmds, e.tenant, run.ID)
	require.NoError(t, err)
	states := func(r metal.Report) []string {
		var out []string
		for _, m := range r.Machines {
			out = append(out, m.Machine+"."+strconv.Itoa(m.Seq)+"="+m.State)
		}
		return out
	}
	require.Equal(t, []string{"m1.1=pending", "m1.2=waiting", "m2.1=pending", "m2.2=waiting"}, states(rep))

	mod := e.mod
	settle := func(m metal.Machine, to modules.State, reason string) {
		e.bench.Report(t, modulestest.Report{CommandID: m.CommandID, NodeID: e.site, To: to, Reason: reason})
		w := wakes.Wake{Owner: "wf:" + run.ID, Args: wakes.Args{Key: "wf:" + run.ID + ":" + m.Machine + "." + strconv.Itoa(m.Seq),
			CommandID: m.CommandID, NodeID: e.site, CommandKind: m.Kind, State: string(to), Reason: reason}}
		require.NoError(t, mod.Wake(e.ctx, w))
		require.NoError(t, mod.Wake(e.ctx, w), "a second delivery changes nothing")
	}
	settle(rep.Machines[0], modules.StateSucceeded, "")
	settle(rep.Machines[2], modules.StateFailed, "bmc-unreachable")
	rep, err = metal.Get(e.ctx, e.pool, e.cmds, e.tenant, run.ID)
	require.NoError(t, err)
	require.Equal(t, []string{"m1.1=succeeded", "m1.2=pending", "m2.1=failed", "m2.2=skipped"}, states(rep))
	require.Contains(t, rep.Machines[3].Message, "step 1 (bmc.boot) ended failed bmc-unreachable")
	c, err := e.cmds.Get(e.ctx, e.pool, e.site, rep.Machines[1].CommandID)
	require.NoError(t, err)
	require.Equal(t, "bmc.power", c.Kind)
	require.Equal(t, "wf:"+run.ID+":m1.2", c.IdempotencyKey)
	require.Equal(t, run.BatchID, c.BatchID)
	require.Equal(t, metal.StateRunning, rep.State)

	settle(rep.Machines[1], modules.StateSucceeded, "")
	rep, err = metal.Get(e.ctx, e.pool, e.cmds, e.tenant, run.ID)
	require.NoError(t, err)
	require.Equal(t, metal.StateFailed, rep.State, "every step ended, not all succeeded")
}
