package gateway_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/better-compute/commands/internal/trust"

	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/controlplane/commands/queue"
	"github.com/better-compute/commands/controlplane/testing/fakedaemon"
	"github.com/better-compute/commands/internal/testutil"
	agentv1 "github.com/better-compute/commands/proto/bc/agent/v1"
)

// outageScript answers a command's first delivery only once the test has
// cut the database (with then), and every later one with Succeed.
type outageScript struct {
	cut  chan struct{}
	once sync.Once
	done atomic.Bool
	then fakedaemon.Action
}

func newOutageScript(then fakedaemon.Action) *outageScript {
	return &outageScript{cut: make(chan struct{}), then: then}
}

func (o *outageScript) script(*agentv1.Command) fakedaemon.Action {
	if o.done.CompareAndSwap(false, true) {
		<-o.cut
		return o.then
	}
	return fakedaemon.Action{Kind: fakedaemon.Succeed}
}

// release lets the first answer go; safe to call twice.
func (o *outageScript) release() { o.once.Do(func() { close(o.cut) }) }

// waitHandled waits until the gateway has dealt with the node's report of
// id while the database is unreachable: it acknowledged it, or logged that
// it could not store it.
func (e *env) waitHandled(d *fakedaemon.Daemon, id string) {
	e.t.Helper()
	testutil.WaitFor(e.t, 15*time.Second, "the gateway to handle the report of "+id, func() bool {
		if d.Acks(id) > 0 {
			return true
		}
		for _, line := range strings.Split(e.logs.String(), "\n") {
			if strings.Contains(line, id) && (strings.Contains(line, "[WARN]") || strings.Contains(line, "held")) {
				return true
			}
		}
		return false
	})
}

func (e *env) settledEvents(id string) int {
	e.t.Helper()
	var n int
	require.NoError(e.t, e.pool.QueryRow(e.ctx,
		`SELECT count(*) FROM outbox WHERE topic = 'command.settled' AND payload->>'commandId' = $1`, id).Scan(&n))
	return n
}

// "BUSY: no credits; the gateway puts the command back to pending with a
// backoff from 1 to 30 seconds", also when the database is unreachable as
// the refusal arrives: the refusal is not acknowledged before the requeue
// is stored, and once the database is back the command goes back to
// pending and runs, instead of keeping its credit until the sweeper fails
// it.
func TestGateway_BusyDuringDatabaseOutageIsRequeuedWhenItReturns(t *testing.T) {
	e := setupWith(t, setupOptions{proxy: true, logs: true})
	o := newOutageScript(fakedaemon.Action{Kind: fakedaemon.Reject, Code: agentv1.RejectCode_REJECT_CODE_BUSY})
	d := fakedaemon.New(e.node.ID)
	d.Script = o.script
	defer e.run(d, e.dial(trust.Identity{NodeID: e.node.ID}, 0))()
	defer o.release()
	c := e.enqueue("test.ctl", "busy-outage")
	testutil.WaitFor(t, 10*time.Second, "the command to reach the node", func() bool { return len(d.Received()) == 1 })

	e.proxy.Cut()
	o.release()
	e.waitHandled(d, c.ID)
	require.Zero(t, d.Acks(c.ID), "BUSY is acknowledged only once the requeue is stored")

	e.proxy.Restore()
	got := e.waitState(c.ID, queue.Succeeded)
	require.Equal(t, 2, got.Attempts, "refused BUSY once, then dispatched again and run")
	require.Equal(t, 1, d.Runs(c.ID))
	require.Equal(t, 1, e.settledEvents(c.ID))
}

// "Reports may skip steps: a lost acknowledgement does not stop a result
// from landing": a node's reports that arrive while the database is
// unreachable are neither acknowledged nor dropped; the gateway stores them
// once it is back, in the same session, and acknowledges them then.
func TestGateway_ReportsDuringDatabaseOutageLandWhenItReturns(t *testing.T) {
	e := setupWith(t, setupOptions{proxy: true, logs: true})
	o := newOutageScript(fakedaemon.Action{Kind: fakedaemon.Succeed, Result: json.RawMessage(`{"gpus":8}`)})
	d := fakedaemon.New(e.node.ID)
	d.Script = o.script
	defer e.run(d, e.dial(trust.Identity{NodeID: e.node.ID}, 0))()
	defer o.release()
	c := e.enqueue("test.ctl", "report-outage")
	testutil.WaitFor(t, 10*time.Second, "the command to reach the node", func() bool { return len(d.Received()) == 1 })

	e.proxy.Cut()
	o.release()
	e.waitHandled(d, c.ID)
	require.Zero(t, d.Acks(c.ID), "a report is acknowledged only once it is stored")

	e.proxy.Restore()
	got := e.waitState(c.ID, queue.Succeeded)
	require.JSONEq(t, `{"gpus":8}`, string(got.Result))
	testutil.WaitFor(t, 10*time.Second, "the stored reports to be acknowledged", func() bool { return d.Acks(c.ID) > 0 })
	require.Equal(t, 1, d.Runs(c.ID))
	require.Equal(t, 1, e.settledEvents(c.ID), "exactly one command.settled")
}

// During a database outage the gateway logs the outage once and its end
// once, with counts, instead of a line per failed request: the session
// keeps polling, dispatching and retrying its held reports meanwhile.
func TestGateway_DatabaseOutageIsLoggedOnceWithCounts(t *testing.T) {
	e := setupWith(t, setupOptions{proxy: true, logs: true})
	o := newOutageScript(fakedaemon.Action{Kind: fakedaemon.Succeed})
	d := fakedaemon.New(e.node.ID)
	d.Script = o.script
	defer e.run(d, e.dial(trust.Identity{NodeID: e.node.ID}, 0))()
	defer o.release()
	c := e.enqueue("test.ctl", "logged-outage")
	testutil.WaitFor(t, 10*time.Second, "the command to reach the node", func() bool { return len(d.Received()) == 1 })

	e.proxy.Cut()
	o.release()
	e.waitHandled(d, c.ID)
	// Let the outage cost more than one failed request: the dispatch
	// listener's reconnects (logged at debug only) fail too.
	testutil.WaitFor(t, 15*time.Second, "more failed requests", func() bool {
		return strings.Count(e.logs.String(), "dispatch listener lost") >= 2
	})
	e.proxy.Restore()
	e.waitState(c.ID, queue.Succeeded)
	testutil.WaitFor(t, 10*time.Second, "the end of the outage to be logged", func() bool {
		return strings.Contains(e.logs.String(), "database reachable again")
	})

	logs := e.logs.String()
	require.Equal(t, 1, strings.Count(logs, "database unreachable"), logs)
	require.Equal(t, 1, strings.Count(logs, "database reachable again"), logs)
	var end string
	for _, line := range strings.Split(logs, "\n") {
		if strings.Contains(line, "database reachable again") {
			end = line
		}
		require.NotContains(t, line, "[ERROR]", "no error for an outage")
		if strings.Contains(line, "[WARN]") {
			require.Contains(t, line, "database unreachable", "the outage is the only warning")
		}
	}
	require.Regexp(t, `failed_operations=[1-9]`, end)
	require.Regexp(t, `reports_held=[1-9]`, end)
	require.Contains(t, end, "outage=")
}

// A report the database refuses (jsonb takes no \u0000) is not
// acknowledged, so the node keeps it, and it holds up nothing: the steps it
// superseded land on their own, and the node's next command runs.
func TestGateway_RefusedReportHoldsUpNothing(t *testing.T) {
	e := setupWith(t, setupOptions{logs: true})
	d := fakedaemon.New(e.node.ID)
	d.Script = func(c *agentv1.Command) fakedaemon.Action {
		if c.GetIdempotencyKey() == "refused" {
			return fakedaemon.Action{Kind: fakedaemon.Succeed, Result: json.RawMessage(`{"text":"\u0000"}`)}
		}
		return fakedaemon.Action{Kind: fakedaemon.Succeed}
	}
	defer e.run(d, e.dial(trust.Identity{NodeID: e.node.ID}, 0))()
	bad := e.enqueue("test.ctl", "refused")
	e.waitState(bad.ID, queue.Running)
	testutil.WaitFor(t, 10*time.Second, "the refusal to be logged", func() bool {
		return strings.Contains(e.logs.String(), "the database refused a report")
	})
	next := e.enqueue("test.ctl", "next")
	e.waitState(next.ID, queue.Succeeded)
	require.Equal(t, queue.Running, e.get(bad.ID).State)
	require.Zero(t, e.settledEvents(bad.ID))
}

// The node sends its status only when it changed, so a NodeStatus that
// finds the database away is kept and stored once it is back.
func TestGateway_NodeStatusDuringDatabaseOutageIsStoredWhenItReturns(t *testing.T) {
	e := setupWith(t, setupOptions{proxy: true, logs: true})
	ctx, cancel := context.WithCancel(e.ctx)
	defer cancel()
	stream, err := agentv1.NewSessionClient(e.dial(trust.Identity{NodeID: e.node.ID}, 0)).Connect(ctx)
	require.NoError(t, err)
	require.NoError(t, stream.Send(&agentv1.NodeMessage{Msg: &agentv1.NodeMessage_Hello{Hello: &agentv1.Hello{
		NodeId: e.node.ID, JournalId: "j", BootId: "b", Role: "node"}}}))
	_, err = stream.Recv()
	require.NoError(t, err)

	e.proxy.Cut()
	require.NoError(t, stream.Send(&agentv1.NodeMessage{Msg: &agentv1.NodeMessage_Status{Status: &agentv1.NodeStatus{
		Inventory:  []byte(`{"gpus":[{"index":0}]}`),
		Conditions: []*agentv1.NodeCondition{{Type: "RebootRequired", Status: true}},
	}}}))
	testutil.WaitFor(t, 15*time.Second, "the status to be held", func() bool {
		return strings.Contains(e.logs.String(), "node status held")
	})
	e.proxy.Restore()
	var conds, inv string
	testutil.WaitFor(t, 15*time.Second, "the held status to be stored", func() bool {
		err := e.pool.QueryRow(e.ctx, `SELECT coalesce(conditions::text, ''), coalesce(inventory::text, '') FROM nodes WHERE id = $1`, e.node.ID).Scan(&conds, &inv)
		return err == nil && conds != ""
	})
	require.JSONEq(t, `[{"type":"RebootRequired","status":"True","reason":"","message":""}]`, conds)
	require.JSONEq(t, `{"gpus":[{"index":0}]}`, inv)
}
