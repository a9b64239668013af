package gateway

import (
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"

	agentv1 "github.com/better-compute/commands/proto/bc/agent/v1"
)

func upd(id string, st agentv1.CommandState) *agentv1.NodeMessage {
	return &agentv1.NodeMessage{Msg: &agentv1.NodeMessage_Update{Update: &agentv1.CommandUpdate{CommandId: id, State: st}}}
}

// "Reports may skip steps": acked and running queued before a result of the
// same command need no write of their own; a terminal report always lands.
func TestSupersededBy(t *testing.T) {
	acked, running, done := agentv1.CommandState_COMMAND_STATE_ACKED, agentv1.CommandState_COMMAND_STATE_RUNNING, agentv1.CommandState_COMMAND_STATE_SUCCEEDED
	batch := []*agentv1.NodeMessage{upd("a", acked), upd("b", acked), upd("a", running), upd("a", done), upd("b", running)}
	require.Equal(t, 2, supersededBy(batch, 0), "a acked is overtaken by a running")
	require.Equal(t, 4, supersededBy(batch, 1), "b acked is overtaken by b running")
	require.Equal(t, 3, supersededBy(batch, 2), "a running is overtaken by a succeeded")
	require.Equal(t, -1, supersededBy(batch, 3), "a terminal report always lands")
	require.Equal(t, -1, supersededBy(batch, 4), "the last report of b lands")

	busy := &agentv1.NodeMessage{Msg: &agentv1.NodeMessage_Update{Update: &agentv1.CommandUpdate{CommandId: "c",
		State: agentv1.CommandState_COMMAND_STATE_REJECTED, RejectCode: agentv1.RejectCode_REJECT_CODE_BUSY}}}
	require.Equal(t, -1, supersededBy([]*agentv1.NodeMessage{upd("c", acked), busy}, 0), "BUSY does not overtake")
}

// sentRecorder is a session's stream that keeps what the gateway sends.
type sentRecorder struct {
	grpc.BidiStreamingServer[agentv1.NodeMessage, agentv1.GatewayMessage]
	sent []*agentv1.GatewayMessage
}

func (r *sentRecorder) Send(m *agentv1.GatewayMessage) error {
	r.sent = append(r.sent, m)
	return nil
}

// "UpdateAck tells the node an update is stored and need not be resent. It
// covers the command's earlier updates too": a report that superseded
// earlier ones of its command is acknowledged once, for the latest, and
// only a covered update of a higher update_seq (a node that numbers
// otherwise) gets an acknowledgement of its own.
func TestAckCoversTheSupersededUpdatesOnce(t *testing.T) {
	u := func(seq int64, st agentv1.CommandState) *agentv1.CommandUpdate {
		return &agentv1.CommandUpdate{CommandId: "a", UpdateSeq: seq, State: st}
	}
	acked, running, done := agentv1.CommandState_COMMAND_STATE_ACKED, agentv1.CommandState_COMMAND_STATE_RUNNING, agentv1.CommandState_COMMAND_STATE_SUCCEEDED
	acks := func(r report) []int64 {
		rec := &sentRecorder{}
		s := &session{stream: rec}
		require.NoError(t, s.ack(r))
		var seqs []int64
		for _, m := range rec.sent {
			require.Equal(t, "a", m.GetAck().GetCommandId())
			seqs = append(seqs, m.GetAck().GetUpdateSeq())
		}
		return seqs
	}
	require.Equal(t, []int64{3}, acks(report{update: u(3, done), covers: []*agentv1.CommandUpdate{u(1, acked), u(2, running)}}))
	require.Equal(t, []int64{7, 5}, acks(report{update: u(5, done), covers: []*agentv1.CommandUpdate{u(7, running)}}))
	require.Equal(t, []int64{4}, acks(report{update: u(4, running)}))
}
