package session_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/better-compute/commands/bcd/session"
	agentv1 "github.com/better-compute/commands/proto/bc/agent/v1"
)

// FuzzDecodeCommand feeds arbitrary envelope bytes to the decoder: it never
// panics, and what it accepts keeps the fields the acceptance checks read.
func FuzzDecodeCommand(f *testing.F) {
	good, err := proto.Marshal(&agentv1.Command{Id: "cmd_1", NodeId: "node_1", Seq: 3, Kind: "diag.nvml", Payload: []byte(`{}`),
		NotAfter: timestamppb.New(time.Unix(1800000000, 0)), MinGeneration: 2})
	require.NoError(f, err)
	f.Add(good)
	f.Add([]byte{})
	f.Add([]byte{0x0a, 0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		env := &agentv1.CommandEnvelope{Command: b}
		cmd, err := session.DecodeCommand(env)
		if err != nil {
			return
		}
		var pc agentv1.Command
		require.NoError(t, proto.Unmarshal(b, &pc))
		require.Equal(t, pc.GetId(), cmd.ID)
		require.NotEmpty(t, cmd.ID)
		require.Equal(t, pc.GetKind(), cmd.Kind)
		require.Equal(t, pc.GetMinGeneration(), cmd.MinGeneration)
		require.Same(t, env, cmd.Envelope, "the exact envelope goes along for the signature checks")
	})
}
