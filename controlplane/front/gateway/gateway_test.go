package gateway_test

import (
	"crypto/tls"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/better-compute/commands/internal/trust"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/better-compute/commands/controlplane/commands/queue"
	"github.com/better-compute/commands/controlplane/testing/fakedaemon"
	agentv1 "github.com/better-compute/commands/proto/bc/agent/v1"
	"github.com/better-compute/commands/sdk/kind"
)

func TestGateway_CommandRunsToSucceeded(t *testing.T) {
	e := setup(t, 1)
	d := fakedaemon.New(e.node.ID)
	d.Script = func(*agentv1.Command) fakedaemon.Action {
		return fakedaemon.Action{Kind: fakedaemon.Succeed, Result: json.RawMessage(`{"gpus":8}`)}
	}
	defer e.run(d, e.dial(trust.Identity{NodeID: e.node.ID}, 0))()
	c := e.enqueue("test.ctl", "k1")
	got := e.waitState(c.ID, queue.Succeeded)
	require.JSONEq(t, `{"gpus":8}`, string(got.Result))
	require.NotNil(t, got.SettledAt)
	require.Equal(t, 1, d.Runs(c.ID))
}

func TestGateway_NoSessionWithoutNodeCertificate(t *testing.T) {
	e := setup(t, 1)
	conn, err := grpc.NewClient(e.addrs[0], grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: e.ca.Pool(), MinVersion: tls.VersionTLS13})))
	require.NoError(t, err)
	defer conn.Close()
	err = fakedaemon.New(e.node.ID).Run(e.ctx, conn)
	require.Error(t, err, "a session without a client certificate must fail")

	// A certificate for another node cannot speak for this one.
	other := fakedaemon.New(e.node.ID)
	err = other.Run(e.ctx, e.dial(trust.Identity{NodeID: "node_someone_else"}, 0))
	require.ErrorContains(t, err, "certificate is for")
}

// "at most 8 control, 4 provision and 2 bulk commands outstanding per
// session; the rest stay pending" — asserted from the gateway's own accounting
// under a burst of 100 commands to one node.
func TestGateway_CreditsNeverExceededUnderBurst(t *testing.T) {
	e := setup(t, 1)
	d := fakedaemon.New(e.node.ID)
	d.Script = func(*agentv1.Command) fakedaemon.Action {
		return fakedaemon.Action{Kind: fakedaemon.Succeed, Delay: 5 * time.Millisecond}
	}
	defer e.run(d, e.dial(trust.Identity{NodeID: e.node.ID}, 0))()
	var ids []string
	for i := 0; i < 90; i++ {
		ids = append(ids, e.enqueue("test.ctl", "ctl-"+string(rune('a'+i/26))+string(rune('a'+i%26))).ID)
	}
	for i := 0; i < 10; i++ {
		ids = append(ids, e.enqueue("test.bulk", "bulk-"+string(rune('a'+i))).ID)
	}
	for _, id := range ids {
		e.waitState(id, queue.Succeeded)
		require.Equal(t, 1, d.Runs(id), "every command runs once")
	}
	max := e.gws[0].MaxOutstanding(e.node.ID)
	require.LessOrEqual(t, max[kind.LaneControl], 8)
	require.LessOrEqual(t, max[kind.LaneBulk], 2)
	require.Greater(t, max[kind.LaneControl], 1, "the burst should have used several control credits")
}

// "BUSY puts the command back to pending with a backoff".
func TestGateway_BusyGoesBackToPendingThenRuns(t *testing.T) {
	e := setup(t, 1)
	d := fakedaemon.New(e.node.ID)
	var mu sync.Mutex
	busy := 1
	d.Script = func(*agentv1.Command) fakedaemon.Action {
		mu.Lock()
		defer mu.Unlock()
		if busy > 0 {
			busy--
			return fakedaemon.Action{Kind: fakedaemon.Reject, Code: agentv1.RejectCode_REJECT_CODE_BUSY}
		}
		return fakedaemon.Action{Kind: fakedaemon.Succeed}
	}
	defer e.run(d, e.dial(trust.Identity{NodeID: e.node.ID}, 0))()
	c := e.enqueue("test.ctl", "busy")
	got := e.waitState(c.ID, queue.Succeeded)
	require.Equal(t, 2, got.Attempts, "dispatched twice: once refused BUSY, once run")
}

// "an in-flight command keeps its state and is marked cancel_requested_at; the
// gateway sends Cancel until the daemon reports a terminal state".
func TestGateway_CancelInFlight(t *testing.T) {
	e := setup(t, 1)
	d := fakedaemon.New(e.node.ID)
	d.Script = func(*agentv1.Command) fakedaemon.Action { return fakedaemon.Action{Kind: fakedaemon.Hang} }
	defer e.run(d, e.dial(trust.Identity{NodeID: e.node.ID}, 0))()
	c := e.enqueue("test.ctl", "hang")
	e.waitState(c.ID, queue.Running)
	require.NoError(t, pgx.BeginFunc(e.ctx, e.pool, func(tx pgx.Tx) error {
		got, err := e.q.Cancel(e.ctx, tx, e.node.ID, c.ID)
		require.Equal(t, queue.Running, got.State, "an in-flight command keeps its state")
		return err
	}))
	got := e.waitState(c.ID, queue.Cancelled)
	require.NotNil(t, got.CancelRequestedAt)
	require.Contains(t, d.Cancels(), c.ID)
}
