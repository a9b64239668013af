package gateway_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/better-compute/commands/controlplane/commands/queue"
	"github.com/better-compute/commands/controlplane/internal/groupcommit"
	"github.com/better-compute/commands/internal/testutil"
	"github.com/better-compute/commands/internal/trust"
	agentv1 "github.com/better-compute/commands/proto/bc/agent/v1"
)

// rawNode is a node's session driven by the test itself, message by
// message, so that it decides when each report goes out.
type rawNode struct {
	id     string
	stream agentv1.Session_ConnectClient
}

func (e *env) rawNode(t *testing.T) *rawNode {
	t.Helper()
	n, err := e.q.CreateNode(e.ctx, e.pool, queue.Node{TenantID: e.node.TenantID})
	require.NoError(t, err)
	conn := e.dial(trust.Identity{NodeID: n.ID}, 0)
	stream, err := agentv1.NewSessionClient(conn).Connect(e.ctx)
	require.NoError(t, err)
	require.NoError(t, stream.Send(&agentv1.NodeMessage{Msg: &agentv1.NodeMessage_Hello{Hello: &agentv1.Hello{
		NodeId: n.ID, JournalId: "j-" + n.ID, BootId: "b-" + n.ID, Role: "node", DaemonVersion: "raw"}}}))
	m, err := stream.Recv()
	require.NoError(t, err)
	require.NotNil(t, m.GetWelcome(), "the first answer is Welcome")
	return &rawNode{id: n.ID, stream: stream}
}

func (e *env) stateOf(t *testing.T, id string) queue.State {
	t.Helper()
	c, err := e.q.Get(e.ctx, e.pool, "", id)
	require.NoError(t, err)
	return c.State
}

// next reads messages until one that want picks.
func (n *rawNode) next(want func(*agentv1.GatewayMessage) bool) (*agentv1.GatewayMessage, error) {
	for {
		m, err := n.stream.Recv()
		if err != nil {
			return nil, err
		}
		if want(m) {
			return m, nil
		}
	}
}

// "The gateway stores node reports in groups (many sessions' updates in one
// transaction, each acknowledged after its group commits)": with the
// gateway's one group worker held, a fan-out's dispatches and then the
// nodes' results wait together; released, each goes out as one group, a
// command reaches its node only once it is stored as dispatched, and each
// node's UpdateAck arrives only when its result is committed (read from
// another connection at the moment the ack arrives).
func TestGateway_ReportsOfManySessionsShareACommitAndAreAckedAfterIt(t *testing.T) {
	var sizesLock sync.Mutex
	var sizes []int
	e := setupWith(t, setupOptions{gateways: 1, group: groupcommit.Options{Workers: 1, Observe: func(n int) {
		sizesLock.Lock()
		defer sizesLock.Unlock()
		sizes = append(sizes, n)
	}}})
	gw := e.gws[0]
	const k = 12
	nodes := make([]*rawNode, k)
	for i := range nodes {
		nodes[i] = e.rawNode(t)
	}
	// Let the sessions' first reads finish, so that only the fan-out's
	// stores queue behind the held worker.
	testutil.WaitFor(t, 10*time.Second, "sessions", func() bool { return gw.Sessions() == k })

	release := gw.HoldGroups(t)
	ids := map[string]string{} // node -> command
	require.NoError(t, pgx.BeginFunc(e.ctx, e.pool, func(tx pgx.Tx) error {
		for _, n := range nodes {
			c, _, err := e.q.Enqueue(e.ctx, tx, queue.EnqueueParams{TenantID: e.node.TenantID, NodeID: n.id, Kind: "test.ctl", IdempotencyKey: "fan"})
			if err != nil {
				return err
			}
			ids[n.id] = c.ID
		}
		return nil
	}))
	testutil.WaitFor(t, 10*time.Second, "every dispatch queued for the group", func() bool { return gw.GroupWaiting() == k })
	for _, id := range ids {
		require.Equal(t, queue.Pending, e.stateOf(t, id), "not marked dispatched while its group waits")
	}
	release()

	// Each node receives its command, which is stored as dispatched.
	errs := make(chan error, k)
	var wg sync.WaitGroup
	for _, n := range nodes {
		m, err := n.next(func(m *agentv1.GatewayMessage) bool { return m.GetCommand() != nil })
		require.NoError(t, err)
		require.NotNil(t, m)
		c, err := e.q.Get(e.ctx, e.pool, "", ids[n.id])
		require.NoError(t, err)
		require.Equal(t, queue.Dispatched, c.State, "a command goes out only once stored as dispatched")
	}

	release = gw.HoldGroups(t)
	for _, n := range nodes {
		require.NoError(t, n.stream.Send(&agentv1.NodeMessage{Msg: &agentv1.NodeMessage_Update{Update: &agentv1.CommandUpdate{
			CommandId: ids[n.id], UpdateSeq: 1, State: agentv1.CommandState_COMMAND_STATE_SUCCEEDED}}}))
	}
	testutil.WaitFor(t, 10*time.Second, "every report queued for the group", func() bool { return gw.GroupWaiting() == k })
	for _, n := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m, err := n.next(func(m *agentv1.GatewayMessage) bool { return m.GetAck() != nil })
			if err != nil {
				errs <- err
				return
			}
			// Acknowledged: it must already be committed, seen from elsewhere.
			c, err := e.q.Get(context.Background(), e.pool, "", ids[n.id])
			if err != nil {
				errs <- err
				return
			}
			if m.GetAck().GetCommandId() != ids[n.id] || m.GetAck().GetUpdateSeq() != 1 || c.State != queue.Succeeded {
				errs <- fmt.Errorf("node %s: ack %v arrived with the command %s in the database", n.id, m.GetAck(), c.State)
			}
		}()
	}
	for _, id := range ids {
		require.Equal(t, queue.Dispatched, e.stateOf(t, id), "not stored while its group waits")
	}
	release()
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	sizesLock.Lock()
	defer sizesLock.Unlock()
	require.Contains(t, sizes, k, "the fan-out's dispatches went out as one transaction")
	require.Equal(t, k, sizes[len(sizes)-1], "the nodes' reports were stored in one transaction")
}

// A dispatch whose commit the session never heard back from (the
// connection lost in COMMIT, a failover) may have landed: the command is
// dispatched under the session's own epoch and the node never got it. "A
// command that cannot progress" must not be left so: the session's next
// read finds a command of its epoch that it holds no credit for, and sends
// it (the node's journal answers a copy it already has). The state below
// is exactly what such a commit leaves: marked dispatched by this session,
// never sent.
func TestGateway_SendsADispatchWhoseCommitItNeverHeardBackFrom(t *testing.T) {
	e := setup(t, 1)
	n := e.rawNode(t)
	testutil.WaitFor(t, 10*time.Second, "the session", func() bool { return e.gws[0].Sessions() == 1 })
	var epoch int64
	require.NoError(t, e.pool.QueryRow(e.ctx, `SELECT session_epoch FROM nodes WHERE id = $1`, n.id).Scan(&epoch))
	var id string
	require.NoError(t, pgx.BeginFunc(e.ctx, e.pool, func(tx pgx.Tx) error {
		c, _, err := e.q.Enqueue(e.ctx, tx, queue.EnqueueParams{TenantID: e.node.TenantID, NodeID: n.id, Kind: "test.ctl", IdempotencyKey: "lost-commit"})
		if err != nil {
			return err
		}
		id = c.ID
		_, changed, err := e.q.Transition(e.ctx, tx, queue.Transition{CommandID: c.ID, NodeID: n.id, To: queue.Dispatched, Epoch: epoch})
		if err == nil && !changed {
			err = fmt.Errorf("the dispatch did not land")
		}
		return err
	}))
	got := make(chan *agentv1.GatewayMessage, 1)
	go func() {
		m, _ := n.next(func(m *agentv1.GatewayMessage) bool { return m.GetCommand() != nil })
		got <- m
	}()
	var m *agentv1.GatewayMessage
	select {
	case m = <-got:
		require.NotNil(t, m, "the stream ended")
	case <-time.After(15 * time.Second):
		t.Fatal("the command dispatched under the session's epoch never reached the node")
	}
	var cmd agentv1.Command
	require.NoError(t, proto.Unmarshal(m.GetCommand().GetCommand(), &cmd))
	require.Equal(t, id, cmd.GetId(), "the dispatched command reaches its node")
	require.NoError(t, n.stream.Send(&agentv1.NodeMessage{Msg: &agentv1.NodeMessage_Update{Update: &agentv1.CommandUpdate{
		CommandId: id, UpdateSeq: 1, State: agentv1.CommandState_COMMAND_STATE_SUCCEEDED}}}))
	testutil.WaitFor(t, 10*time.Second, "it settles", func() bool { return e.stateOf(t, id) == queue.Succeeded })
}
