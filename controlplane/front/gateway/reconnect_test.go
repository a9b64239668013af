package gateway_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/better-compute/commands/internal/trust"

	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/controlplane/commands/queue"
	"github.com/better-compute/commands/controlplane/testing/fakedaemon"
	"github.com/better-compute/commands/internal/testutil"
	agentv1 "github.com/better-compute/commands/proto/bc/agent/v1"
)

// "Hello first settles what the reconnect proves": a new boot id completes an
// in-flight self-terminating command with rebooted: true; a new journal id
// fails in-flight commands that are not retry-safe with journal-lost; the
// retry-safe one is replayed.
func TestGateway_ReconnectSettlesBootAndJournal(t *testing.T) {
	e := setup(t, 1)
	d := fakedaemon.New(e.node.ID)
	d.Script = func(*agentv1.Command) fakedaemon.Action { return fakedaemon.Action{Kind: fakedaemon.Hang} }
	conn := e.dial(trust.Identity{NodeID: e.node.ID}, 0)
	stop := e.run(d, conn)
	reboot := e.enqueue("test.reboot", "reboot")
	e.waitState(reboot.ID, queue.Running)
	stop()

	d.Reboot()
	stop = e.run(d, conn)
	got := e.waitState(reboot.ID, queue.Succeeded)
	require.True(t, got.Rebooted)

	once := e.enqueue("test.once", "once")
	safe := e.enqueue("test.ctl", "safe")
	e.waitState(once.ID, queue.Running)
	e.waitState(safe.ID, queue.Running)
	stop()

	d.LoseJournal()
	d.Script = func(*agentv1.Command) fakedaemon.Action { return fakedaemon.Action{Kind: fakedaemon.Succeed} }
	defer e.run(d, conn)()
	lost := e.waitState(once.ID, queue.Failed)
	require.Equal(t, "journal-lost", lost.Reason)
	e.waitState(safe.ID, queue.Succeeded)
	require.Equal(t, 1, d.Runs(once.ID), "a command that is not retry-safe never runs twice")
}

// "Self-terminating kinds. A new boot or role on rejoin completes them as
// succeeded with rebooted: true": a node that comes back under another role
// (a discovery ramdisk booted into the installed system) with the same boot id.
func TestGateway_ReconnectWithNewRoleCompletesSelfTerminating(t *testing.T) {
	e := setup(t, 1)
	d := fakedaemon.New(e.node.ID)
	d.Script = func(*agentv1.Command) fakedaemon.Action { return fakedaemon.Action{Kind: fakedaemon.Hang} }
	conn := e.dial(trust.Identity{NodeID: e.node.ID}, 0)
	stop := e.run(d, conn)
	reboot := e.enqueue("test.reboot", "reboot")
	once := e.enqueue("test.once", "once")
	e.waitState(reboot.ID, queue.Running)
	e.waitState(once.ID, queue.Running)
	stop()

	// The node joined again, with a certificate for another role.
	d.Role = "discovery"
	defer e.run(d, e.dial(trust.Identity{NodeID: e.node.ID, Role: "discovery"}, 0))()
	got := e.waitState(reboot.ID, queue.Succeeded)
	require.True(t, got.Rebooted)
	require.Equal(t, queue.Running, e.get(once.ID).State, "a kind that is not self-terminating is replayed, not completed")
}

// "Session epochs fence stale sessions": with two gateways on one database, a
// node's newer session wins and the older one's reports change nothing.
func TestGateway_TwoGatewaysFenceStaleSession(t *testing.T) {
	e := setup(t, 2)
	old := fakedaemon.New(e.node.ID)
	hold := make(chan struct{})
	old.Script = func(*agentv1.Command) fakedaemon.Action {
		<-hold
		return fakedaemon.Action{Kind: fakedaemon.SkipToResult, Result: json.RawMessage(`{"from":"old"}`)}
	}
	stopOld := e.run(old, e.dial(trust.Identity{NodeID: e.node.ID}, 0))
	defer stopOld()
	c := e.enqueue("test.ctl", "fenced")
	testutil.WaitFor(t, 10*time.Second, "old session to receive the command", func() bool { return len(old.Received()) == 1 })

	fresh := fakedaemon.New(e.node.ID)
	fresh.JournalID = old.JournalID
	fresh.BootID = old.BootID
	fresh.Script = func(*agentv1.Command) fakedaemon.Action {
		return fakedaemon.Action{Kind: fakedaemon.SkipToResult, Result: json.RawMessage(`{"from":"new"}`)}
	}
	defer e.run(fresh, e.dial(trust.Identity{NodeID: e.node.ID}, 1))()
	// The new session replays the in-flight command and settles it; then the
	// stale session's late report must change nothing.
	got := e.waitState(c.ID, queue.Succeeded)
	require.JSONEq(t, `{"from":"new"}`, string(got.Result))
	close(hold)
	testutil.WaitFor(t, 10*time.Second, "the stale session's report to be processed", func() bool { return old.Acks(c.ID) >= 1 })
	require.JSONEq(t, `{"from":"new"}`, string(e.get(c.ID).Result))
}

// "The restricted identity is checked again at dispatch against the session's certificate."
func TestGateway_RestrictedIdentityCheckedAtDispatch(t *testing.T) {
	e := setup(t, 1)
	d := fakedaemon.New(e.node.ID)
	defer e.run(d, e.dial(trust.Identity{NodeID: e.node.ID, Role: "node", AllowedKinds: []string{"test.bulk"}}, 0))()
	c := e.enqueue("test.ctl", "restricted")
	got := e.waitState(c.ID, queue.Rejected)
	require.Equal(t, "UNSUPPORTED", got.Reason, "a reason is a bare code")
	require.Contains(t, got.Message, "restricted identity that does not accept test.ctl")
	require.Zero(t, d.Runs(c.ID))
}
