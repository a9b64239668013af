package gateway

import (
	"context"
	"encoding/json"
	"strings"
	"time"

	"github.com/better-compute/commands/controlplane/commands/queue"
	agentv1 "github.com/better-compute/commands/proto/bc/agent/v1"
)

// report is one of the node's CommandUpdates as the session lands it, with
// the earlier updates of the same command that it superseded in its batch:
// those are acknowledged with it, once it is stored.
type report struct {
	update *agentv1.CommandUpdate
	covers []*agentv1.CommandUpdate
}

// outcome is what landing a report came to.
type outcome int

const (
	// landed: stored, or there is nothing to store (an unknown command, a
	// fenced session); acknowledge it.
	landed outcome = iota
	// retry: the database did not answer; hold the report and retry.
	retry
	// refused: the database answered with an error that a retry would
	// repeat; it is logged and not acknowledged, so the node keeps it.
	refused
)

var stateOf = map[agentv1.CommandState]queue.State{
	agentv1.CommandState_COMMAND_STATE_ACKED:     queue.Acked,
	agentv1.CommandState_COMMAND_STATE_RUNNING:   queue.Running,
	agentv1.CommandState_COMMAND_STATE_SUCCEEDED: queue.Succeeded,
	agentv1.CommandState_COMMAND_STATE_FAILED:    queue.Failed,
	agentv1.CommandState_COMMAND_STATE_REJECTED:  queue.Rejected,
	agentv1.CommandState_COMMAND_STATE_EXPIRED:   queue.Expired,
	agentv1.CommandState_COMMAND_STATE_CANCELLED: queue.Cancelled,
}

// report lands r and acknowledges it once it is stored: "UpdateAck tells the
// node an update is stored and need not be resent", so an acknowledgement
// before the write would lose the report when the write fails. Reports are
// stored in the order the node sent them: while any wait for the database,
// a new one waits behind them.
func (s *session) report(ctx context.Context, r report) error {
	if s.held.waiting() {
		s.holdReport(r)
		return nil
	}
	out, err := s.land(ctx, r.update)
	if err != nil {
		return err
	}
	switch out {
	case retry:
		s.holdReport(r)
		return nil
	case refused:
		return s.landCovers(ctx, r)
	}
	return s.ack(r)
}

// landCovers lands, one by one, the updates that a refused report
// superseded: skipping their writes was only sound if the later one landed.
func (s *session) landCovers(ctx context.Context, r report) error {
	for _, u := range r.covers {
		if err := s.report(ctx, report{update: u}); err != nil {
			return err
		}
	}
	return nil
}

// ack acknowledges r and the updates it covers. An acknowledgement covers
// its command's updates up to its update_seq (the node drops them all:
// bcd/session's ack), so a covered update of a seq no higher than r's needs
// no message of its own: a node that sent acked, running and succeeded
// back to back gets one acknowledgement, not three (a fan-out to 10,000
// nodes whose reports arrive together sends up to 20,000 fewer messages).
func (s *session) ack(r report) error {
	for _, u := range r.covers {
		if u.GetUpdateSeq() <= r.update.GetUpdateSeq() {
			continue
		}
		if err := s.sendAck(u); err != nil {
			return err
		}
	}
	return s.sendAck(r.update)
}

func (s *session) sendAck(u *agentv1.CommandUpdate) error {
	return s.send(&agentv1.GatewayMessage{Msg: &agentv1.GatewayMessage_Ack{Ack: &agentv1.UpdateAck{
		CommandId: u.GetCommandId(), UpdateSeq: u.GetUpdateSeq()}}})
}

// land stores one report: a BUSY refusal requeues the command; any other
// state is a guarded transition fenced by the session's epoch and node.
func (s *session) land(ctx context.Context, u *agentv1.CommandUpdate) (outcome, error) {
	if u.GetState() == agentv1.CommandState_COMMAND_STATE_REJECTED && u.GetRejectCode() == agentv1.RejectCode_REJECT_CODE_BUSY {
		return s.requeueBusy(ctx, u)
	}
	t, ok := s.transitionOf(u)
	if !ok {
		s.logger.Warn("update without a state", "command_id", u.GetCommandId())
		return landed, nil
	}
	landStart := time.Now()
	st, err := s.storeGrouped(ctx, t)
	if err != nil {
		return s.landErr(ctx, "storing a report", u, err)
	}
	if !st.found {
		return landed, nil // not this node's command: nothing will ever land
	}
	cur, changed := st.cur, st.changed
	s.g.outage.OK()
	s.g.opts.Observer.Reported(cur, changed)
	if !changed && t.Progress != nil && !cur.State.Terminal() {
		// A step of a command already running: the transition changed
		// nothing, so store the progress itself, throttled.
		return s.progress(ctx, cur.ID, t.Progress)
	}
	if !changed && queue.Contradicts(cur, t) {
		// "A report that contradicts a stored terminal state is never
		// dropped silently": the first state stays, this one is stored
		// beside it and its owner woken.
		if _, err := s.g.queue.RecordContradiction(ctx, s.g.pool, cur, t); err != nil {
			return s.landErr(ctx, "storing a contradicting report", u, err)
		}
	}
	if cur.State.Terminal() {
		delete(s.progressDue, cur.ID)
		delete(s.progressAt, cur.ID)
		if changed {
			s.settleSpan(cur, landStart)
		}
		if changed && s.g.opts.OnSettled != nil {
			s.g.opts.OnSettled(ctx, cur)
		}
		s.releaseCredit(cur.ID)
		s.creditBack()
	}
	return landed, nil
}

// creditBack wakes the session when a credit returned and the last read
// left a pending command for want of one: it may go now. Without such a
// command there is nothing to read.
func (s *session) creditBack() {
	if !s.starved {
		return
	}
	s.wake.read.Store(true)
	select {
	case s.wake.ch <- struct{}{}:
	default:
	}
}

// transitionOf is the queue transition u reports; false for an update
// without a state.
func (s *session) transitionOf(u *agentv1.CommandUpdate) (queue.Transition, bool) {
	to, ok := stateOf[u.GetState()]
	if !ok {
		return queue.Transition{}, false
	}
	t := queue.Transition{
		CommandID: u.GetCommandId(), NodeID: s.id.NodeID, To: to, Reason: u.GetReason(), Message: u.GetMessage(),
		ResultSHA256: u.GetResultSha256(), NodeSig: u.GetNodeSig(), Rebooted: u.GetRebooted(), Epoch: s.epoch,
	}
	if to == queue.Rejected && u.GetRejectCode() != agentv1.RejectCode_REJECT_CODE_UNSPECIFIED {
		// A refusal's reason is its bare code; the words go in message (an
		// older bcd sent "CODE: words" as the reason).
		code := rejectName(u.GetRejectCode())
		if rest, ok := strings.CutPrefix(t.Reason, code+": "); ok && t.Message == "" {
			t.Message = rest
		}
		t.Reason = code
	}
	if len(u.GetNodeSig()) > 0 {
		// The node signed the SHA-256 of these exact bytes; the jsonb result
		// will not keep them.
		t.ResultBytes = u.GetResult()
	}
	if len(u.GetResult()) > 0 {
		if json.Valid(u.GetResult()) {
			t.Result = u.GetResult()
		} else {
			s.logger.Warn("result is not JSON; storing it as a string", "command_id", u.GetCommandId())
			b, _ := json.Marshal(string(u.GetResult()))
			t.Result = b
		}
	}
	if u.GetProgressMessage() != "" || u.GetProgressPercent() != 0 {
		b, _ := json.Marshal(map[string]any{"percent": u.GetProgressPercent(), "message": u.GetProgressMessage()})
		t.Progress = b
	}
	return t, true
}

func rejectName(c agentv1.RejectCode) string {
	n := c.String()
	const prefix = "REJECT_CODE_"
	if len(n) > len(prefix) {
		return n[len(prefix):]
	}
	return n
}

// supersededBy returns the index of a later update in batch of the same
// command that moves it at least as far as the non-terminal update
// batch[i], or -1: reports may skip steps, so landing only the later one
// loses nothing but a write. A node that sends acked, running and succeeded
// back to back costs one transition instead of three. Ranks are the
// queue's (the database's bc_state_rank); BUSY never supersedes, since it
// moves the command back.
func supersededBy(batch []*agentv1.NodeMessage, i int) int {
	u := batch[i].GetUpdate()
	if u == nil {
		return -1
	}
	rank := stateOf[u.GetState()].Rank()
	if rank == 0 || stateOf[u.GetState()].Terminal() {
		return -1
	}
	for j := i + 1; j < len(batch); j++ {
		later := batch[j].GetUpdate()
		if later == nil || later.GetCommandId() != u.GetCommandId() || later.GetRejectCode() == agentv1.RejectCode_REJECT_CODE_BUSY {
			continue
		}
		if stateOf[later.GetState()].Rank() >= rank {
			return j
		}
	}
	return -1
}
