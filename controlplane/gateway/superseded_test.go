package gateway

import (
	"testing"

	"github.com/stretchr/testify/require"

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
