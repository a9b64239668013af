package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/better-compute/commands/controlplane/server"
	"github.com/better-compute/commands/controlplane/server/servertest"
	"github.com/better-compute/commands/internal/testutil"
	agentv1 "github.com/better-compute/commands/proto/bc/agent/v1"
	apiv1 "github.com/better-compute/commands/proto/bc/api/v1"
)

// "Two control plane replicas against one database behave: test with two
// gateways." Two servers share one PostgreSQL database and node CA. bcd
// joins through gateway A, runs a command there, and stops. Commands queued
// meanwhile (through B's API) go to an older session of the node on A
// that never answers; bcd then restarts pointed at gateway B: the session
// epoch moves forward, B delivers the commands in seq order, the old
// session's reports change nothing, every command reaches exactly one
// terminal state and none that is not retry-safe runs twice. One sweeper
// leads between the two servers throughout, and the other takes over when
// the leader stops.
func TestE2E_TwoGatewaysOneDatabase(t *testing.T) {
	// A 1s sweep (a 3s lease) keeps a stalled tick on this busy machine
	// from passing for a second leader.
	c := newCluster(t, func(cfg *server.Config) { cfg.Sweeper.Interval = server.Duration(time.Second) })
	a := c.srv
	b := servertest.StartReplica(t, a, nil)
	require.NotEqual(t, a.Gateway, b.Gateway)
	connB, err := grpc.NewClient(b.GRPC, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { _ = connB.Close() })
	apiB := apiv1.NewCommandsClient(connB)

	oneLeader := func(when string) {
		t.Helper()
		testutil.WaitFor(t, 15*time.Second, "one sweeper to lead "+when, func() bool {
			la, lb := a.Server.Sweeper().Leading(), b.Server.Sweeper().Leading()
			require.False(t, la && lb, "both sweepers lead %s", when)
			return la != lb
		})
	}
	oneLeader("once both servers run")

	n := c.join()
	n.start()
	epochA := c.sessionEpoch()
	first := newHold(t)
	first.releaseNow(t)
	firstCmd := c.run(kindHoldOnce, first.payload())
	c.waitState(firstCmd.GetId(), "succeeded")
	n.stop()

	// Queued meanwhile, through the other replica's API.
	type queued struct {
		h    hold
		cmd  *apiv1.Command
		held bool
	}
	var qs []queued
	for i, k := range []string{kindHoldOnce, kindHold, kindHoldOnce, kindHoldOnce} {
		h := newHold(t)
		held := i == 2 // stays running until released: the target of a stale report
		if !held {
			h.releaseNow(t)
		}
		qs = append(qs, queued{h: h, cmd: c.runVia(apiB, k, h.payload()), held: held})
	}
	for i := 1; i < len(qs); i++ {
		require.Greater(t, qs[i].cmd.GetSeq(), qs[i-1].cmd.GetSeq())
	}

	// An older session of the node on gateway A, with bcd's own
	// certificate and journal and boot ids: A dispatches the queued
	// commands to it, in seq order, and it never answers.
	stale := c.openRawSession(a.Gateway, n)
	epochStale := stale.epoch
	require.Greater(t, epochStale, epochA)
	for _, q := range qs {
		got := stale.nextCommand(t)
		require.Equal(t, q.cmd.GetId(), got.GetId(), "gateway A dispatches in seq order")
	}

	// bcd comes back on gateway B.
	n.controlPlane = b.Gateway
	n.start()
	epochB := c.sessionEpoch()
	require.Greater(t, epochB, epochStale, "the session epoch moved forward")
	for _, q := range qs {
		if q.held {
			q.h.waitStarted(t)
			c.waitState(q.cmd.GetId(), "running")
			continue
		}
		got := c.waitState(q.cmd.GetId(), "succeeded")
		require.Equal(t, float64(1), got.GetResult().GetStructValue().AsMap()["runs"])
	}

	// Reports over the stale session change nothing: a forged success of
	// the running command, and a failure of a settled one.
	held, done := qs[2], qs[0]
	heldBefore, doneBefore := c.get(held.cmd.GetId()), c.get(done.cmd.GetId())
	forged, err := json.Marshal(map[string]any{"forged": true})
	require.NoError(t, err)
	stale.report(t, &agentv1.CommandUpdate{CommandId: held.cmd.GetId(), State: agentv1.CommandState_COMMAND_STATE_SUCCEEDED, Result: forged})
	stale.report(t, &agentv1.CommandUpdate{CommandId: done.cmd.GetId(), State: agentv1.CommandState_COMMAND_STATE_FAILED, Reason: "forged"})
	heldAfter, doneAfter := c.get(held.cmd.GetId()), c.get(done.cmd.GetId())
	require.Equal(t, "running", heldAfter.GetState(), "a stale session's success does not land")
	require.True(t, proto.Equal(heldBefore.GetResult(), heldAfter.GetResult()), "the result is not the forged one: %v", heldAfter.GetResult())
	require.True(t, proto.Equal(doneBefore, doneAfter), "a stale session's failure of a settled command changes nothing")

	// A command queued now goes to bcd through B, never through the
	// stale session (its dispatch is fenced by the newer epoch).
	late := newHold(t)
	late.releaseNow(t)
	lateCmd := c.run(kindHoldOnce, late.payload())
	c.waitState(lateCmd.GetId(), "succeeded")
	require.NotContains(t, stale.commandIDs(), lateCmd.GetId(), "the stale session got no new command")

	held.h.releaseNow(t)
	got := c.waitState(held.cmd.GetId(), "succeeded")
	require.Equal(t, map[string]any{"runs": float64(1), "released": true}, got.GetResult().GetStructValue().AsMap(), "bcd's own result")

	// Exactly one terminal state each; what is not retry-safe ran once
	// (and the retry-safe one too: nothing made it run again).
	for _, h := range append([]hold{first, late}, qs[0].h, qs[1].h, qs[2].h, qs[3].h) {
		require.Equal(t, 1, h.runs(t))
	}
	for _, id := range []string{firstCmd.GetId(), lateCmd.GetId(), qs[0].cmd.GetId(), qs[1].cmd.GetId(), qs[2].cmd.GetId(), qs[3].cmd.GetId()} {
		require.Equal(t, 1, c.settledCount(id), "exactly one terminal state for %s", id)
	}
	require.Equal(t, epochB, c.sessionEpoch(), "bcd kept its one session on B")
	oneLeader("after the failover")

	// bcd accepted the commands in the order B delivered them: seq order.
	n.stop()
	out, errs, code := n.bcd("journal", "--json", "--limit", "100")
	require.Equal(t, 0, code, errs)
	var j struct {
		Records []struct {
			ID  string `json:"id"`
			Seq int64  `json:"seq"`
		} `json:"records"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &j), out)
	var order []string
	for i := len(j.Records) - 1; i >= 0; i-- { // newest first
		order = append(order, j.Records[i].ID)
	}
	require.Equal(t, []string{firstCmd.GetId(), qs[0].cmd.GetId(), qs[1].cmd.GetId(), qs[2].cmd.GetId(), qs[3].cmd.GetId(), lateCmd.GetId()}, order)

	// The leader stops (resigning its lease): the other replica's sweeper
	// takes over, and only it leads.
	leader, other := a, b
	if b.Server.Sweeper().Leading() {
		leader, other = b, a
	}
	stale.close()
	require.NoError(t, leader.Stop())
	testutil.WaitFor(t, 15*time.Second, "the other sweeper to lead", func() bool { return other.Server.Sweeper().Leading() })
	require.False(t, leader.Server.Sweeper().Leading())
}

// runVia queues a command through another replica's API.
func (c *cluster) runVia(api apiv1.CommandsClient, k string, payload map[string]any) *apiv1.Command {
	c.t.Helper()
	p, err := structpb.NewStruct(payload)
	require.NoError(c.t, err)
	cmd, err := api.Run(c.ctx(), &apiv1.RunCommandRequest{TenantId: servertest.TenantA, NodeId: servertest.NodeA1, Kind: k, Payload: p})
	require.NoError(c.t, err)
	return cmd
}

// sessionEpoch is the node's current session epoch in the database.
func (c *cluster) sessionEpoch() int64 {
	c.t.Helper()
	var e int64
	require.NoError(c.t, c.srv.Pool.QueryRow(context.Background(), `SELECT session_epoch FROM nodes WHERE id = $1`, servertest.NodeA1).Scan(&e))
	return e
}

// rawSession is a session of the node that the test drives by hand.
type rawSession struct {
	stream grpc.BidiStreamingClient[agentv1.NodeMessage, agentv1.GatewayMessage]
	cancel context.CancelFunc
	epoch  int64
	seq    int64

	// lock guards commands and acks, which the reader fills, and taken.
	lock     sync.Mutex
	commands []*agentv1.Command
	acks     map[int64]bool
	taken    int
}

// openRawSession opens a session on gateway with n's certificate, saying
// Hello with the journal and boot ids the control plane holds for the node
// (so the Hello settles nothing), and waits for Welcome.
func (c *cluster) openRawSession(gateway string, n *node) *rawSession {
	t := c.t
	t.Helper()
	dir := filepath.Join(n.state, "tls")
	cert, err := tls.LoadX509KeyPair(filepath.Join(dir, "node.crt"), filepath.Join(dir, "node.key"))
	require.NoError(t, err)
	caPEM, err := os.ReadFile(filepath.Join(dir, "ca.crt"))
	require.NoError(t, err)
	roots := x509.NewCertPool()
	require.True(t, roots.AppendCertsFromPEM(caPEM))
	conn, err := grpc.NewClient(gateway, grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{
		Certificates: []tls.Certificate{cert}, RootCAs: roots, MinVersion: tls.VersionTLS12})))
	require.NoError(t, err)
	var journalID, bootID string
	require.NoError(t, c.srv.Pool.QueryRow(context.Background(), `SELECT journal_id, boot_id FROM nodes WHERE id = $1`, servertest.NodeA1).Scan(&journalID, &bootID))
	ctx, cancel := context.WithCancel(context.Background())
	stream, err := agentv1.NewSessionClient(conn).Connect(ctx)
	require.NoError(t, err)
	r := &rawSession{stream: stream, cancel: cancel, acks: map[int64]bool{}}
	t.Cleanup(func() {
		r.close()
		_ = conn.Close()
	})
	require.NoError(t, stream.Send(&agentv1.NodeMessage{Msg: &agentv1.NodeMessage_Hello{Hello: &agentv1.Hello{
		NodeId: servertest.NodeA1, JournalId: journalID, BootId: bootID, Role: "node"}}}))
	first, err := stream.Recv()
	require.NoError(t, err)
	require.NotNil(t, first.GetWelcome(), "the gateway answers Hello with Welcome: %v", first)
	r.epoch = first.GetWelcome().GetSessionEpoch()
	go r.read()
	return r
}

// read keeps what the gateway sends: commands and acknowledgements.
func (r *rawSession) read() {
	for {
		m, err := r.stream.Recv()
		if err != nil {
			return
		}
		r.lock.Lock()
		if env := m.GetCommand(); env != nil {
			var pc agentv1.Command
			if proto.Unmarshal(env.GetCommand(), &pc) == nil {
				r.commands = append(r.commands, &pc)
			}
		}
		if ack := m.GetAck(); ack != nil {
			r.acks[ack.GetUpdateSeq()] = true
		}
		r.lock.Unlock()
	}
}

func (r *rawSession) commandIDs() []string {
	r.lock.Lock()
	defer r.lock.Unlock()
	var ids []string
	for _, c := range r.commands {
		ids = append(ids, c.GetId())
	}
	return ids
}

// nextCommand waits for the next command the gateway sent after those
// already taken.
func (r *rawSession) nextCommand(t *testing.T) *agentv1.Command {
	t.Helper()
	var got *agentv1.Command
	testutil.WaitFor(t, 30*time.Second, "a command on the raw session", func() bool {
		r.lock.Lock()
		defer r.lock.Unlock()
		if len(r.commands) > r.taken {
			got = r.commands[r.taken]
			r.taken++
			return true
		}
		return false
	})
	return got
}

// report sends u with the session's epoch and the next update_seq, and
// waits for the gateway to acknowledge it: then it has handled it.
func (r *rawSession) report(t *testing.T, u *agentv1.CommandUpdate) {
	t.Helper()
	r.seq++
	u.UpdateSeq, u.SessionEpoch = r.seq, r.epoch
	require.NoError(t, r.stream.Send(&agentv1.NodeMessage{Msg: &agentv1.NodeMessage_Update{Update: u}}))
	seq := r.seq
	testutil.WaitFor(t, 30*time.Second, "the gateway to acknowledge the stale report", func() bool {
		r.lock.Lock()
		defer r.lock.Unlock()
		return r.acks[seq]
	})
}

func (r *rawSession) close() { r.cancel() }
