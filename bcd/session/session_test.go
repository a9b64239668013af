package session_test

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/better-compute/commands/bcd/conditions"
	"github.com/better-compute/commands/bcd/daemon"
	"github.com/better-compute/commands/bcd/journal"
	"github.com/better-compute/commands/bcd/session"
	"github.com/better-compute/commands/internal/testutil"
	agentv1 "github.com/better-compute/commands/proto/bc/agent/v1"
)

func TestMain(m *testing.M) {
	code := m.Run()
	// Issue 32: no goroutine outlives the tests (goleak).
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: goroutines outlived the tests: %v\n", err)
			code = 1
		}
	}
	testutil.CleanupBuilds()
	os.Exit(code)
}

// "reports the journal id and the boot id in Hello"; "resends updates that
// were not acknowledged"; "answers duplicates from the journal".
func TestSession_HelloThenUpdatesResentUntilAckedAndDuplicateAnsweredFromJournal(t *testing.T) {
	r := newRig(t, 0)
	s1 := r.session()
	h := s1.hello
	require.Equal(t, nodeID, h.GetNodeId())
	require.Equal(t, r.d.JournalID(), h.GetJournalId())
	require.Equal(t, "boot-1", h.GetBootId())
	require.Equal(t, "node", h.GetRole())
	require.Equal(t, "test", h.GetDaemonVersion())
	digests := map[string]string{}
	for _, k := range h.GetKinds() {
		digests[k.GetKind()] = k.GetDigest()
	}
	m, ok := r.host.Manifest("bcdcore.hold")
	require.True(t, ok)
	require.Equal(t, m.Digest(), digests["bcdcore.hold"], "kinds carry their manifest digests")

	cmd, count, _ := holdCommand(t, "cmd_1", "bcdcore.holdonce", true)
	s1.send <- envelope(t, cmd)
	first := updatesUntil(t, s1, "cmd_1", agentv1.CommandState_COMMAND_STATE_SUCCEEDED)
	var states []agentv1.CommandState
	var last int64
	for _, u := range first {
		require.Greater(t, u.GetUpdateSeq(), last, "update_seq orders the command's updates")
		last = u.GetUpdateSeq()
		if u.GetProgressMessage() == "" {
			states = append(states, u.GetState())
		}
	}
	require.Equal(t, []agentv1.CommandState{agentv1.CommandState_COMMAND_STATE_ACKED, agentv1.CommandState_COMMAND_STATE_RUNNING,
		agentv1.CommandState_COMMAND_STATE_SUCCEEDED}, states)
	out := first[len(first)-1]
	sum := sha256.Sum256(out.GetResult())
	require.Equal(t, sum[:], out.GetResultSha256())
	require.JSONEq(t, `{"runs":1,"released":true}`, string(out.GetResult()))

	// No acks: a new session gets every state update again, in order.
	s1.close()
	s2 := r.session()
	require.Equal(t, r.d.JournalID(), s2.hello.GetJournalId())
	resent := updatesUntil(t, s2, "cmd_1", agentv1.CommandState_COMMAND_STATE_SUCCEEDED)
	require.Len(t, resent, 3)
	for i, u := range resent {
		require.Equal(t, states[i], u.GetState())
	}
	require.Equal(t, out.GetUpdateSeq(), resent[2].GetUpdateSeq(), "a resent update keeps its update_seq")
	for _, u := range resent {
		s2.send <- &agentv1.GatewayMessage{Msg: &agentv1.GatewayMessage_Ack{Ack: &agentv1.UpdateAck{CommandId: "cmd_1", UpdateSeq: u.GetUpdateSeq()}}}
	}
	testutil.WaitFor(t, 10*time.Second, "the acks to clear the resend queue", func() bool { return r.client.Unacked() == 0 })

	// A duplicate delivery is answered from the journal; nothing runs twice.
	s2.send <- envelope(t, cmd)
	dup := updatesUntil(t, s2, "cmd_1", agentv1.CommandState_COMMAND_STATE_SUCCEEDED)
	require.JSONEq(t, string(out.GetResult()), string(dup[len(dup)-1].GetResult()))
	require.Equal(t, 1, runs(t, count))

	// The next session after acks resends nothing.
	s2.close()
	s3 := r.session()
	s3.send <- envelope(t, &agentv1.Command{Id: "cmd_marker", NodeId: "node_other", Kind: "bcdcore.hold", NotAfter: timestamppb.New(time.Now().Add(time.Minute))})
	got := updatesUntil(t, s3, "cmd_marker", agentv1.CommandState_COMMAND_STATE_REJECTED)
	require.Len(t, got, 1)
	select {
	case m := <-s3.recv:
		require.NotEqual(t, "cmd_1", m.GetUpdate().GetCommandId(), "acknowledged updates are not resent")
	default:
	}
}

// "keeps the server-time offset from Welcome": not_after is judged in
// server time, so a command the node's own clock would still take is
// refused EXPIRED when the server is an hour ahead.
func TestSession_ServerTimeFromWelcomeJudgesExpiry(t *testing.T) {
	r := newRig(t, time.Hour)
	s := r.session()
	cmd, count, _ := holdCommand(t, "cmd_late", "bcdcore.hold", true)
	cmd.NotAfter = timestamppb.New(time.Now().Add(30 * time.Minute))
	s.send <- envelope(t, cmd)
	got := updatesUntil(t, s, "cmd_late", agentv1.CommandState_COMMAND_STATE_REJECTED)
	u := got[len(got)-1]
	require.Equal(t, agentv1.RejectCode_REJECT_CODE_EXPIRED, u.GetRejectCode())
	require.Equal(t, "EXPIRED", u.GetReason(), "a reason is a bare code")
	require.Contains(t, u.GetMessage(), "not_after", "the words travel as the message")
	_, err := os.Stat(count)
	require.True(t, os.IsNotExist(err), "a refused command never runs")
}

// STALE_GENERATION: "for a command whose min_generation is ahead, bcd asks
// for the spec and waits ...; when the spec arrives in time, the remaining
// checks run".
func TestSession_StaleGenerationAsksForTheSpecThenRuns(t *testing.T) {
	r := newRig(t, 0)
	s := r.session()
	cmd, _, _ := holdCommand(t, "cmd_gen", "bcdcore.hold", true)
	cmd.MinGeneration = 2
	s.send <- envelope(t, cmd)
	deadline := time.After(30 * time.Second)
	for asked := false; !asked; {
		select {
		case m := <-s.recv:
			if sr := m.GetSpecRequest(); sr != nil {
				require.Equal(t, int64(0), sr.GetHaveGeneration())
				asked = true
			}
			require.Nil(t, m.GetUpdate(), "nothing is reported while the command waits for its spec")
		case <-deadline:
			t.Fatal("no SpecRequest")
		}
	}
	s.send <- &agentv1.GatewayMessage{Msg: &agentv1.GatewayMessage_Spec{Spec: &agentv1.Spec{Generation: 2, Spec: []byte(`{}`)}}}
	updatesUntil(t, s, "cmd_gen", agentv1.CommandState_COMMAND_STATE_SUCCEEDED)
	require.Equal(t, int64(2), r.state.Generation())
}

// "Cancel -> the daemon": a running command stops and reports cancelled.
func TestSession_CancelStopsTheRunningCommand(t *testing.T) {
	r := newRig(t, 0)
	s := r.session()
	cmd, count, _ := holdCommand(t, "cmd_c", "bcdcore.hold", false)
	s.send <- envelope(t, cmd)
	updatesUntil(t, s, "cmd_c", agentv1.CommandState_COMMAND_STATE_RUNNING)
	s.send <- &agentv1.GatewayMessage{Msg: &agentv1.GatewayMessage_Cancel{Cancel: &agentv1.Cancel{CommandId: "cmd_c"}}}
	got := updatesUntil(t, s, "cmd_c", agentv1.CommandState_COMMAND_STATE_CANCELLED)
	require.JSONEq(t, `{"runs":1,"released":false}`, string(got[len(got)-1].GetResult()))
	require.Equal(t, 1, runs(t, count))
}

// NodeStatus goes at session open, with every known condition.
func TestSession_NodeStatusAtSessionOpen(t *testing.T) {
	r := newRig(t, 0)
	s := r.session()
	deadline := time.After(30 * time.Second)
	for {
		select {
		case m := <-s.recv:
			st := m.GetStatus()
			if st == nil {
				continue
			}
			require.NotEmpty(t, st.GetConditions())
			require.Equal(t, conditions.TypeRebootRequired, st.GetConditions()[0].GetType())
			require.False(t, st.GetConditions()[0].GetStatus())
			return
		case <-deadline:
			t.Fatal("no NodeStatus")
		}
	}
}

func TestJitter_StaysInTheUpperHalf(t *testing.T) {
	for i := 0; i < 1000; i++ {
		j := session.Jitter(time.Second)
		require.GreaterOrEqual(t, j, 500*time.Millisecond)
		require.LessOrEqual(t, j, time.Second)
	}
}

func TestToProto_RefusalCarriesItsCode(t *testing.T) {
	u := session.ToProto(daemon.Update{CommandID: "c", State: journal.StateRejected, RejectCode: "BUSY", Reason: "BUSY", Message: "lane control is full"})
	require.Equal(t, agentv1.CommandState_COMMAND_STATE_REJECTED, u.GetState())
	require.Equal(t, agentv1.RejectCode_REJECT_CODE_BUSY, u.GetRejectCode())
	require.Equal(t, "BUSY", u.GetReason(), "a reason is a bare code")
	require.Equal(t, "lane control is full", u.GetMessage())
	p := session.ToProto(daemon.Update{CommandID: "c", State: journal.StateRunning, Progress: &daemon.Progress{Percent: 40, Message: "step"}})
	require.Equal(t, int32(40), p.GetProgressPercent())
	require.Equal(t, "step", p.GetProgressMessage())
	s := session.ToProto(daemon.Update{CommandID: "c", State: journal.StateSucceeded, Rebooted: true})
	require.True(t, s.GetRebooted())
}

// NodeStatus carries the inventory once it changed (inventory.refresh
// calls PutInventory), checked after each outcome.
func TestSession_NodeStatusCarriesTheInventoryAfterItChanged(t *testing.T) {
	r := newRig(t, 0)
	s := r.session()
	require.NoError(t, r.state.PutInventory(context.Background(), json.RawMessage(`{"gpus":[{"uuid":"GPU-1"}]}`)))
	cmd, _, _ := holdCommand(t, "cmd_inv", "bcdcore.hold", true)
	s.send <- envelope(t, cmd)
	deadline := time.After(30 * time.Second)
	for {
		select {
		case m := <-s.recv:
			if st := m.GetStatus(); st != nil && len(st.GetInventory()) > 0 {
				require.JSONEq(t, `{"gpus":[{"uuid":"GPU-1"}]}`, string(st.GetInventory()))
				return
			}
		case <-deadline:
			t.Fatal("no NodeStatus with the inventory")
		}
	}
}
