package session_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/better-compute/commands/bcd/session"
	"github.com/better-compute/commands/internal/testutil"
	agentv1 "github.com/better-compute/commands/proto/bc/agent/v1"
)

// "UpdateAck tells the node an update is stored and need not be resent":
// while the gateway acknowledges nothing (its database is away), bcd sends
// the outcome again on the same live session, at growing intervals, with
// the same update_seq, until an acknowledgement comes; then no more.
func TestSession_UnacknowledgedUpdatesResentInTheLiveSession(t *testing.T) {
	r := newRig(t, 0, func(c *session.Config) { c.ResendMin, c.ResendMax = 50*time.Millisecond, 200*time.Millisecond })
	s := r.session()
	cmd, count, _ := holdCommand(t, "cmd_r", "bcdcore.holdonce", true)
	s.send <- envelope(t, cmd)
	first := updatesUntil(t, s, "cmd_r", agentv1.CommandState_COMMAND_STATE_SUCCEEDED)
	done, sentAt := first[len(first)-1], time.Now()

	// No ack: the result comes again, three times, on the same session.
	for resends := 0; resends < 3; resends++ {
		again := updatesUntil(t, s, "cmd_r", agentv1.CommandState_COMMAND_STATE_SUCCEEDED)
		u := again[len(again)-1]
		require.Equal(t, done.GetUpdateSeq(), u.GetUpdateSeq(), "a resent update keeps its update_seq")
		require.JSONEq(t, string(done.GetResult()), string(u.GetResult()))
	}
	// Each resend waits for an update unanswered for the current wait,
	// which doubles: 50+100+200ms at least, where a fixed 50ms would take 150.
	require.GreaterOrEqual(t, time.Since(sentAt), 250*time.Millisecond, "the wait between resends grows")
	require.Equal(t, 1, r.client.Sessions(), "resent within the session, without a reconnect")
	require.Equal(t, 1, runs(t, count), "resending reports; it never runs the command again")

	// The ack ends the resends.
	s.send <- &agentv1.GatewayMessage{Msg: &agentv1.GatewayMessage_Ack{Ack: &agentv1.UpdateAck{CommandId: "cmd_r", UpdateSeq: done.GetUpdateSeq()}}}
	testutil.WaitFor(t, 10*time.Second, "the ack to clear the resend queue", func() bool { return r.client.Unacked() == 0 })
	// Updates sent before the ack landed may still be on their way: they
	// all come before the answer to a first marker command; between it and
	// the answer to a second, nothing of cmd_r comes.
	marker := func(id string) []*agentv1.CommandUpdate {
		s.send <- envelope(t, &agentv1.Command{Id: id, NodeId: "node_other", Kind: "bcdcore.hold", NotAfter: timestamppb.New(time.Now().Add(time.Minute))})
		var seen []*agentv1.CommandUpdate
		deadline := time.After(30 * time.Second)
		for {
			select {
			case m := <-s.recv:
				u := m.GetUpdate()
				if u == nil {
					continue
				}
				if u.GetCommandId() == id {
					return seen
				}
				seen = append(seen, u)
			case <-deadline:
				t.Fatalf("no answer to %s", id)
			}
		}
	}
	marker("cmd_marker1")
	for _, u := range marker("cmd_marker2") {
		require.NotEqual(t, "cmd_r", u.GetCommandId(), "an acknowledged update is not resent")
	}
}
