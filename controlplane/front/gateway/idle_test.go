package gateway_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/controlplane/commands/queue"
	"github.com/better-compute/commands/controlplane/testing/fakedaemon"
	"github.com/better-compute/commands/controlplane/trust/trustbundle"
	"github.com/better-compute/commands/internal/testutil"
	"github.com/better-compute/commands/internal/trust"
	agentv1 "github.com/better-compute/commands/proto/bc/agent/v1"
)

// An idle session holds no timer: its only work arrives as wake-ups, so
// thousands of quiet sessions cost the gateway nothing between them
// (BenchmarkSessions' idle CPU). A second session, whose pending command
// waits for its not_before, polls every Poll meanwhile: it is the clock
// this test waits on, with no sleep.
func TestGateway_AnIdleSessionsTimerDoesNotFire(t *testing.T) {
	e := setupWith(t, setupOptions{gateways: 1, poll: 20 * time.Millisecond})
	idle := fakedaemon.New(e.node.ID)
	defer e.run(idle, e.dial(trust.Identity{NodeID: e.node.ID}, 0))()
	first := e.enqueue("test.ctl", "before-idle")
	e.waitState(first.ID, queue.Succeeded)
	testutil.WaitFor(t, 10*time.Second, "the session to be idle", func() bool { return e.gws[0].IdleSessions() == 1 })

	busy, err := e.q.CreateNode(e.ctx, e.pool, queue.Node{TenantID: e.node.TenantID})
	require.NoError(t, err)
	later := time.Now().Add(time.Hour)
	require.NoError(t, pgx.BeginFunc(e.ctx, e.pool, func(tx pgx.Tx) error {
		_, _, err := e.q.Enqueue(e.ctx, tx, queue.EnqueueParams{TenantID: busy.TenantID, NodeID: busy.ID, Kind: "test.ctl", NotBefore: &later})
		return err
	}))
	defer e.run(fakedaemon.New(busy.ID), e.dial(trust.Identity{NodeID: busy.ID}, 0))()

	before := e.gws[0].Ticks(e.node.ID)
	testutil.WaitFor(t, 10*time.Second, "the session with a command not yet due to poll ten times", func() bool {
		return e.gws[0].Ticks(busy.ID) >= 10
	})
	require.Equal(t, before, e.gws[0].Ticks(e.node.ID), "the idle session's timer fired")
	require.Equal(t, 1, e.gws[0].IdleSessions(), "only the idle session waits for wake-ups")

	// And it still takes work: a new command wakes it.
	second := e.enqueue("test.ctl", "after-idle")
	e.waitState(second.ID, queue.Succeeded)
}

// "open sessions get [a newer trust bundle] at their next Welcome": an
// idle session, which holds no timer, gets one too, through the gateway's
// watch of the published bundles (one read a Poll for all its sessions).
func TestGateway_AnIdleSessionGetsANewerTrustBundle(t *testing.T) {
	e := setupSigned(t)
	welcomes := make(chan *agentv1.Welcome, 8)
	d := fakedaemon.New(e.node.ID)
	d.OnWelcome = func(w *agentv1.Welcome) { welcomes <- w }
	defer e.run(d, e.dial(trust.Identity{NodeID: e.node.ID, Role: "node"}, 0))()
	first := <-welcomes
	require.Equal(t, e.bundle.Version, first.GetTrustBundle().GetVersion())
	testutil.WaitFor(t, 10*time.Second, "the session to be idle", func() bool { return e.gws[0].IdleSessions() == 1 })

	newer := publishAgain(t, e)
	ctx, cancel := context.WithTimeout(e.ctx, 10*time.Second)
	defer cancel()
	select {
	case w := <-welcomes:
		require.Equal(t, newer, w.GetTrustBundle().GetVersion())
		require.Equal(t, first.GetSessionEpoch(), w.GetSessionEpoch(), "the same session")
	case <-ctx.Done():
		t.Fatal("the idle session got no Welcome with the newer trust bundle")
	}
}

// publishAgain publishes the env's trust bundle content again as the next
// version (a rotation's step publishes with a minimum version), and returns
// that version.
func publishAgain(t *testing.T, e *signedEnv) int64 {
	t.Helper()
	content, err := trustbundle.Content(trustbundle.Settings{}, e.auth.RootPublic())
	require.NoError(t, err)
	tb, err := trustbundle.Publish(e.ctx, e.pool, content, e.auth, e.bundle.Version+1, time.Now())
	require.NoError(t, err)
	require.Greater(t, tb.GetVersion(), e.bundle.Version)
	return tb.GetVersion()
}

// With tracing off (the default: no OTLP endpoint) the gateway builds no
// span, and the node gets the trace parent the command was queued under,
// as stored, so that its own spans still join the caller's trace when the
// node exports them.
func TestGateway_WithTracingOffTheNodeGetsTheStoredTraceParent(t *testing.T) {
	e := setup(t, 1)
	d := fakedaemon.New(e.node.ID)
	defer e.run(d, e.dial(trust.Identity{NodeID: e.node.ID}, 0))()
	const parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	var c queue.Command
	require.NoError(t, pgx.BeginFunc(e.ctx, e.pool, func(tx pgx.Tx) error {
		var err error
		c, _, err = e.q.Enqueue(e.ctx, tx, queue.EnqueueParams{TenantID: e.node.TenantID, NodeID: e.node.ID, Kind: "test.ctl", IdempotencyKey: "traced", TraceParent: parent})
		return err
	}))
	e.waitState(c.ID, queue.Succeeded)
	envs := d.Envelopes()
	require.Len(t, envs, 1)
	require.Equal(t, parent, envs[0].GetTraceParent())
}
