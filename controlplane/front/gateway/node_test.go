package gateway_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/better-compute/commands/internal/trust"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/controlplane/commands/queue"
	"github.com/better-compute/commands/controlplane/fleet/nodespecs"
	"github.com/better-compute/commands/controlplane/testing/fakedaemon"
	"github.com/better-compute/commands/internal/testutil"
	agentv1 "github.com/better-compute/commands/proto/bc/agent/v1"
)

// The spec is pushed on change and on SpecRequest.
func TestGateway_PushesNewSpecGeneration(t *testing.T) {
	e := setup(t, 1)
	d := fakedaemon.New(e.node.ID)
	conn := e.dial(trust.Identity{NodeID: e.node.ID}, 0)
	stop := e.run(d, conn)
	g, err := nodespecs.Set(e.ctx, e.pool, e.node.ID, json.RawMessage(`{"holds":[{"gpu":"GPU-1","state":"live"}]}`), nil)
	require.NoError(t, err)
	require.Equal(t, int64(1), g.Generation)
	testutil.WaitFor(t, 10*time.Second, "generation 1 to be pushed on change", func() bool {
		specs := d.Specs()
		return len(specs) == 1 && specs[0].GetGeneration() == 1
	})
	require.JSONEq(t, `{"holds":[{"gpu":"GPU-1","state":"live"}]}`, string(d.Specs()[0].GetSpec()))
	stop()

	// A node that has applied generation 1 asks for the spec: it gets
	// nothing older; once generation 2 exists, it gets that.
	_, err = nodespecs.Set(e.ctx, e.pool, e.node.ID, json.RawMessage(`{"holds":[]}`), nil)
	require.NoError(t, err)
	again := fakedaemon.New(e.node.ID)
	again.JournalID, again.BootID = d.JournalID, d.BootID
	again.AppliedGeneration = 1
	again.RequestSpec = true
	defer e.run(again, conn)()
	testutil.WaitFor(t, 10*time.Second, "generation 2 in answer to the SpecRequest", func() bool {
		for _, s := range again.Specs() {
			if s.GetGeneration() == 2 {
				return true
			}
		}
		return false
	})
	for _, s := range again.Specs() {
		require.Equal(t, int64(2), s.GetGeneration(), "never a generation the node already applied")
	}
}

// Conditions travel to the control plane: NodeStatus lands on the node row
// in the form the API shows ("True"/"False").
func TestGateway_StoresNodeStatus(t *testing.T) {
	e := setup(t, 1)
	d := fakedaemon.New(e.node.ID)
	d.Status = &agentv1.NodeStatus{
		Inventory:  []byte(`{"gpus":[{"index":0}]}`),
		Conditions: []*agentv1.NodeCondition{{Type: "RebootRequired", Status: true, Reason: "reboot-required-file"}},
	}
	defer e.run(d, e.dial(trust.Identity{NodeID: e.node.ID}, 0))()
	var conds, inv string
	testutil.WaitFor(t, 10*time.Second, "the node's status to be stored", func() bool {
		err := e.pool.QueryRow(e.ctx, `SELECT coalesce(conditions::text, ''), coalesce(inventory::text, '') FROM nodes WHERE id = $1`, e.node.ID).Scan(&conds, &inv)
		return err == nil && conds != ""
	})
	require.JSONEq(t, `[{"type":"RebootRequired","status":"True","reason":"reboot-required-file","message":""}]`, conds)
	require.JSONEq(t, `{"gpus":[{"index":0}]}`, inv)
}

// A node's session moves only its own commands: epochs count per node, so a
// second node whose session has the same epoch number must not settle the
// first node's command by naming its id. The gateway acknowledges the report
// and changes nothing.
func TestGateway_SessionCannotSettleAnotherNodesCommand(t *testing.T) {
	e := setup(t, 1)
	d := fakedaemon.New(e.node.ID)
	d.Script = func(*agentv1.Command) fakedaemon.Action { return fakedaemon.Action{Kind: fakedaemon.Hang} }
	defer e.run(d, e.dial(trust.Identity{NodeID: e.node.ID}, 0))()
	c := e.enqueue("test.ctl", "victim")
	e.waitState(c.ID, queue.Running)

	other, err := e.q.CreateNode(e.ctx, e.pool, queue.Node{TenantID: e.node.TenantID})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(e.ctx)
	defer cancel()
	stream, err := agentv1.NewSessionClient(e.dial(trust.Identity{NodeID: other.ID}, 0)).Connect(ctx)
	require.NoError(t, err)
	require.NoError(t, stream.Send(&agentv1.NodeMessage{Msg: &agentv1.NodeMessage_Hello{Hello: &agentv1.Hello{
		NodeId: other.ID, JournalId: "j", BootId: "b", Role: "node"}}}))
	first, err := stream.Recv()
	require.NoError(t, err)
	require.Equal(t, e.get(c.ID).DispatchedEpoch, first.GetWelcome().GetSessionEpoch(), "the epochs collide")

	require.NoError(t, stream.Send(&agentv1.NodeMessage{Msg: &agentv1.NodeMessage_Update{Update: &agentv1.CommandUpdate{
		CommandId: c.ID, UpdateSeq: 1, State: agentv1.CommandState_COMMAND_STATE_SUCCEEDED, Result: []byte(`{"forged":true}`)}}}))
	for {
		m, err := stream.Recv()
		require.NoError(t, err)
		if a := m.GetAck(); a != nil && a.GetCommandId() == c.ID {
			break
		}
	}
	got := e.get(c.ID)
	require.Equal(t, queue.Running, got.State)
	require.Nil(t, got.Result)
}

// The role is the certificate's: a Hello that claims another is refused.
func TestGateway_HelloCannotClaimAnotherRole(t *testing.T) {
	e := setup(t, 1)
	d := fakedaemon.New(e.node.ID)
	d.Role = "discovery"
	err := d.Run(e.ctx, e.dial(trust.Identity{NodeID: e.node.ID, Role: "node"}, 0))
	require.ErrorContains(t, err, "certificate is for role")
}

// "the manifests' role allowlists say so, and the control plane routes by
// them": a command queued while the node's recorded role allowed it is
// rejected at dispatch once the session's certificate is for a role the
// kind does not run on, and never reaches the node.
func TestGateway_RoutesByTheCertificatesRole(t *testing.T) {
	e := setup(t, 1)
	c := e.enqueue("test.ctl", "role")
	d := fakedaemon.New(e.node.ID)
	d.Role = "site"
	defer e.run(d, e.dial(trust.Identity{NodeID: e.node.ID, Role: "site"}, 0))()
	got := e.waitState(c.ID, queue.Rejected)
	require.Equal(t, "UNSUPPORTED", got.Reason)
	require.Contains(t, got.Message, "test.ctl runs only on role node; this node's certificate is for role site")
	require.Zero(t, d.Runs(c.ID))
	require.Empty(t, d.Received())
}

// An idle session does not poll; a command whose wake-up was lost (its
// NOTIFY never sent) still reaches it, within IdlePoll, through the
// gateway's sweep of its sessions (gateway.Options.IdlePoll). Poll is an
// hour here, so no session's own tick could bring it.
func TestGateway_ACommandWhoseWakeUpWasLostReachesAnIdleSession(t *testing.T) {
	e := setupWith(t, setupOptions{gateways: 1, poll: time.Hour, idlePoll: 100 * time.Millisecond})
	d := fakedaemon.New(e.node.ID)
	d.Script = func(*agentv1.Command) fakedaemon.Action { return fakedaemon.Action{Kind: fakedaemon.Succeed} }
	defer e.run(d, e.dial(trust.Identity{NodeID: e.node.ID}, 0))()
	// A first command, woken as usual, proves the session replayed.
	first := e.enqueue("test.ctl", "woken")
	e.waitState(first.ID, queue.Succeeded)
	// Its session's next read finds nothing open: from then on it waits.
	testutil.WaitFor(t, 10*time.Second, "the session to be idle", func() bool { return e.gws[0].IdleSessions() == 1 })
	// The second is queued with the node's triggers off: no NOTIFY.
	var lost queue.Command
	require.NoError(t, pgx.BeginFunc(e.ctx, e.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(e.ctx, `SET LOCAL session_replication_role = replica`); err != nil {
			return err
		}
		var err error
		lost, _, err = e.q.Enqueue(e.ctx, tx, queue.EnqueueParams{TenantID: e.node.TenantID, NodeID: e.node.ID, Kind: "test.ctl", IdempotencyKey: "not-woken"})
		return err
	}))
	e.waitState(lost.ID, queue.Succeeded)
	require.Equal(t, 1, d.Runs(lost.ID))
}

// A command in flight only waits for its node's report: a session whose
// commands are all in flight waits for a wake-up instead of polling (in a
// fan-out to 19,500 nodes their polls were most of the database's work),
// and what would give it work still reaches it: a cancel request wakes it,
// and the node gets Cancel. Poll and IdlePoll are an hour here, so only the
// wake-up can bring it.
func TestGateway_ASessionWithOnlyCommandsInFlightWaitsAndACancelWakesIt(t *testing.T) {
	e := setupWith(t, setupOptions{gateways: 1, poll: time.Hour, idlePoll: time.Hour})
	d := fakedaemon.New(e.node.ID)
	d.Script = func(*agentv1.Command) fakedaemon.Action { return fakedaemon.Action{Kind: fakedaemon.Hang} }
	defer e.run(d, e.dial(trust.Identity{NodeID: e.node.ID}, 0))()
	c := e.enqueue("test.ctl", "in-flight")
	e.waitState(c.ID, queue.Running)
	testutil.WaitFor(t, 10*time.Second, "the session, its command in flight, to wait for wake-ups", func() bool { return e.gws[0].IdleSessions() == 1 })
	require.NoError(t, pgx.BeginFunc(e.ctx, e.pool, func(tx pgx.Tx) error {
		_, err := e.q.Cancel(e.ctx, tx, e.node.ID, c.ID)
		return err
	}))
	e.waitState(c.ID, queue.Cancelled)
	require.Contains(t, d.Cancels(), c.ID)
}
