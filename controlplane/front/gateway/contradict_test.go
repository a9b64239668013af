package gateway_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/controlplane/commands/queue"
	"github.com/better-compute/commands/controlplane/testing/fakedaemon"
	"github.com/better-compute/commands/internal/testutil"
	"github.com/better-compute/commands/internal/trust"
	agentv1 "github.com/better-compute/commands/proto/bc/agent/v1"
)

// Issue 35: "the old bcd reports failed reason=rolled-back, and the server
// drops that report without a log line." A terminal report that
// contradicts the command's stored terminal state keeps the first state
// (forward-only) but is stored beside it, published as
// command.report.contradicted, and acknowledged; a repeat of it is stored
// once.
func TestGateway_AContradictingReportIsStoredBesideTheOutcome(t *testing.T) {
	e := setup(t, 1)
	d := fakedaemon.New(e.node.ID)
	d.Script = func(*agentv1.Command) fakedaemon.Action { return fakedaemon.Action{Kind: fakedaemon.Hang} }
	conn := e.dial(trust.Identity{NodeID: e.node.ID}, 0)
	stop := e.run(d, conn)
	c := e.enqueue("test.reboot", "reboot")
	e.waitState(c.ID, queue.Running)
	stop()
	d.Reboot()
	stop = e.run(d, conn)
	e.waitState(c.ID, queue.Succeeded)
	stop()

	late := &agentv1.NodeMessage{Msg: &agentv1.NodeMessage_Update{Update: &agentv1.CommandUpdate{CommandId: c.ID, UpdateSeq: 90,
		State: agentv1.CommandState_COMMAND_STATE_FAILED, Reason: "rolled-back", Message: "the new version did not rejoin"}}}
	d.AfterHello = []*agentv1.NodeMessage{late, late}
	before := d.Acks(c.ID)
	defer e.run(d, conn)()
	testutil.WaitFor(t, 15*time.Second, "the contradicting reports to be acknowledged", func() bool { return d.Acks(c.ID) >= before+2 })

	got := e.get(c.ID)
	require.Equal(t, queue.Succeeded, got.State, "the first terminal state stays")
	xs, err := e.q.Contradictions(e.ctx, e.pool, c.ID)
	require.NoError(t, err)
	require.Len(t, xs, 1, "stored once, though sent twice")
	require.Equal(t, queue.Failed, xs[0].ReportedState)
	require.Equal(t, "rolled-back", xs[0].ReportedReason)
	require.Equal(t, "the new version did not rejoin", xs[0].ReportedMessage)
	require.Equal(t, queue.Succeeded, xs[0].StoredState)
	var events int
	require.NoError(t, e.pool.QueryRow(e.ctx, `SELECT count(*) FROM outbox WHERE topic = $1 AND payload->>'commandId' = $2`,
		queue.TopicReportContradicted, c.ID).Scan(&events))
	require.Equal(t, 1, events)
}
