package gateway_test

import (
	"context"
	"github.com/better-compute/commands/internal/trust"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	agentv1 "github.com/better-compute/commands/proto/bc/agent/v1"
)

// rawSession opens a session by hand (Hello, Welcome) and returns a
// function that waits for the next command envelope the gateway sends.
func (e *env) rawSession(journalID string) (next func() *agentv1.CommandEnvelope, stop func()) {
	e.t.Helper()
	ctx, cancel := context.WithCancel(e.ctx)
	stream, err := agentv1.NewSessionClient(e.dial(trust.Identity{NodeID: e.node.ID}, 0)).Connect(ctx)
	require.NoError(e.t, err)
	require.NoError(e.t, stream.Send(&agentv1.NodeMessage{Msg: &agentv1.NodeMessage_Hello{Hello: &agentv1.Hello{
		NodeId: e.node.ID, JournalId: journalID, BootId: "boot", Role: "node"}}}))
	first, err := stream.Recv()
	require.NoError(e.t, err)
	require.NotNil(e.t, first.GetWelcome())
	envs := make(chan *agentv1.CommandEnvelope, 16)
	go func() {
		for {
			m, err := stream.Recv()
			if err != nil {
				return
			}
			if env := m.GetCommand(); env != nil {
				envs <- env
			}
		}
	}()
	next = func() *agentv1.CommandEnvelope {
		e.t.Helper()
		select {
		case env := <-envs:
			return env
		case <-time.After(15 * time.Second):
			e.t.Fatal("no command envelope")
			return nil
		}
	}
	return next, cancel
}

// "A command travels as an envelope: the exact command bytes as stored ...
// Verify what you received; never re-marshal and then verify": the bytes
// the node receives, at dispatch and again at replay, are byte for byte the
// ones stored at enqueue, and the session epoch travels outside them.
func TestGateway_NodeReceivesTheBytesStoredAtEnqueue(t *testing.T) {
	e := setup(t, 1)
	next, stop := e.rawSession("j1")
	c := e.enqueue("test.ctl", "bytes")
	stored := e.get(c.ID).CommandBytes
	require.NotEmpty(t, stored)

	env := next()
	require.Equal(t, stored, env.GetCommand(), "dispatch relays the stored bytes unchanged")
	require.Equal(t, e.get(c.ID).DispatchedEpoch, env.GetSessionEpoch())
	var pc agentv1.Command
	require.NoError(t, proto.Unmarshal(env.GetCommand(), &pc))
	require.Equal(t, c.ID, pc.GetId())
	stop()

	// The reconnect replays the in-flight command: the same bytes, a new epoch.
	next, stop = e.rawSession("j1")
	defer stop()
	replayed := next()
	require.Equal(t, stored, replayed.GetCommand(), "replay relays the stored bytes unchanged")
	require.Greater(t, replayed.GetSessionEpoch(), env.GetSessionEpoch())
}

// The gateway relays the stored bytes, not a marshalling of the row: bytes
// that no marshalling of the columns would produce (an unknown field
// appended, as a newer writer might) reach the node unchanged.
func TestGateway_RelaysStoredBytesNotAMarshalling(t *testing.T) {
	e := setup(t, 1)
	c := e.enqueue("test.ctl", "odd-bytes")
	odd := append(append([]byte{}, c.CommandBytes...), protowire.AppendVarint(protowire.AppendTag(nil, 99, protowire.VarintType), 1)...)
	_, err := e.pool.Exec(e.ctx, `UPDATE commands SET command_bytes = $2 WHERE id = $1`, c.ID, odd)
	require.NoError(t, err)
	next, stop := e.rawSession("j1")
	defer stop()
	require.Equal(t, odd, next().GetCommand())
}

// A row queued before the bytes were stored (migration 0003) still goes out:
// its columns are marshalled as enqueue would have.
func TestGateway_RowWithoutStoredBytesStillGoesOut(t *testing.T) {
	e := setup(t, 1)
	c := e.enqueue("test.ctl", "old-row")
	_, err := e.pool.Exec(e.ctx, `UPDATE commands SET command_bytes = NULL WHERE id = $1`, c.ID)
	require.NoError(t, err)
	next, stop := e.rawSession("j1")
	defer stop()
	require.Equal(t, c.CommandBytes, next().GetCommand())
}
