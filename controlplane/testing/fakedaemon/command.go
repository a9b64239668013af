package fakedaemon

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"time"

	"google.golang.org/protobuf/proto"

	agentv1 "github.com/better-compute/commands/proto/bc/agent/v1"
	"github.com/better-compute/commands/sdk/kind"
)

func (d *Daemon) handle(ctx context.Context, cmd *agentv1.Command, env *agentv1.CommandEnvelope, epoch int64, send func(*agentv1.NodeMessage) error) {
	update := func(u *agentv1.CommandUpdate) {
		u.CommandId = cmd.GetId()
		u.SessionEpoch = epoch
		d.mu.Lock()
		if u.UpdateSeq == 0 {
			u.UpdateSeq = d.nextSeq(cmd.GetId())
		}
		if stateTerminal(u.GetState()) && u.GetRejectCode() != agentv1.RejectCode_REJECT_CODE_BUSY {
			d.terminalSeq[cmd.GetId()] = u.UpdateSeq
		}
		d.mu.Unlock()
		_ = send(&agentv1.NodeMessage{Msg: &agentv1.NodeMessage_Update{Update: u}})
	}
	d.mu.Lock()
	d.received = append(d.received, cmd)
	hook := d.onCommand
	if stored, ok := d.journal[cmd.GetId()]; ok {
		d.mu.Unlock()
		if hook != nil {
			hook(cmd)
		}
		update(proto.Clone(stored).(*agentv1.CommandUpdate))
		return
	}
	if _, ok := d.running[cmd.GetId()]; ok {
		// Re-attach: the command runs already; its outcome will be reported.
		d.mu.Unlock()
		if hook != nil {
			hook(cmd)
		}
		return
	}
	script := d.Script
	if d.Verify != nil {
		if err := d.Verify(env); err != nil {
			u := &agentv1.CommandUpdate{CommandId: cmd.GetId(), State: agentv1.CommandState_COMMAND_STATE_REJECTED,
				RejectCode: agentv1.RejectCode_REJECT_CODE_BAD_SIGNATURE, Reason: "BAD_SIGNATURE", Message: err.Error(),
				UpdateSeq: d.nextSeq(cmd.GetId())}
			d.journal[cmd.GetId()] = u
			d.mu.Unlock()
			if hook != nil {
				hook(cmd)
			}
			update(proto.Clone(u).(*agentv1.CommandUpdate))
			return
		}
	}
	attest := d.Attest
	// Reserve the id so that a concurrent duplicate re-attaches; the script
	// runs outside the lock, since it may block (tests hold it on purpose).
	runCtx, cancel := context.WithCancel(ctx)
	d.running[cmd.GetId()] = cancel
	d.mu.Unlock()
	act := Action{Kind: Succeed}
	if script != nil {
		act = script(cmd)
	}
	d.mu.Lock()
	if act.Kind == Reject || act.Kind == Ignore {
		delete(d.running, cmd.GetId())
	} else {
		d.runs[cmd.GetId()]++
	}
	d.mu.Unlock()
	if hook != nil {
		hook(cmd)
	}
	finish := func(u *agentv1.CommandUpdate) {
		if len(u.Result) > 0 {
			sum := sha256.Sum256(u.Result)
			u.ResultSha256 = sum[:]
		}
		if attest != nil {
			u.CommandId = cmd.GetId()
			attest(env.GetCommand(), u)
		}
		d.mu.Lock()
		delete(d.running, cmd.GetId())
		// Numbered before it is journaled: a replay resends the same seq.
		u.UpdateSeq = d.nextSeq(cmd.GetId())
		if u.GetRejectCode() != agentv1.RejectCode_REJECT_CODE_BUSY {
			d.journal[cmd.GetId()] = u
		}
		d.mu.Unlock()
		update(proto.Clone(u).(*agentv1.CommandUpdate))
	}
	switch act.Kind {
	case Ignore:
		cancel()
		return
	case Reject:
		cancel()
		finish(&agentv1.CommandUpdate{State: agentv1.CommandState_COMMAND_STATE_REJECTED, RejectCode: act.Code, Reason: act.Code.String()})
		return
	}
	defer cancel()
	if act.Kind != SkipToResult {
		update(&agentv1.CommandUpdate{State: agentv1.CommandState_COMMAND_STATE_ACKED})
		update(&agentv1.CommandUpdate{State: agentv1.CommandState_COMMAND_STATE_RUNNING})
	}
	for i := 1; i <= act.Steps; i++ {
		if act.StepEvery > 0 && i > 1 {
			select {
			case <-time.After(act.StepEvery):
			case <-runCtx.Done():
			}
		}
		update(&agentv1.CommandUpdate{State: agentv1.CommandState_COMMAND_STATE_RUNNING, ProgressPercent: int32(i * 100 / act.Steps),
			ProgressMessage: fmt.Sprintf("step %d of %d", i, act.Steps)})
	}
	if act.Kind == Hang {
		<-runCtx.Done()
		if ctx.Err() != nil {
			// The session ended: the fake forgets the run, as a daemon that
			// restarted would; a replay starts it again.
			d.mu.Lock()
			delete(d.running, cmd.GetId())
			d.mu.Unlock()
			return
		}
		finish(&agentv1.CommandUpdate{State: agentv1.CommandState_COMMAND_STATE_CANCELLED, Reason: kind.ReasonCancelled})
		return
	}
	if act.Delay > 0 {
		t := time.NewTimer(act.Delay)
		select {
		case <-t.C:
		case <-runCtx.Done():
			t.Stop()
			if ctx.Err() != nil {
				d.mu.Lock()
				delete(d.running, cmd.GetId())
				d.mu.Unlock()
				return
			}
			finish(&agentv1.CommandUpdate{State: agentv1.CommandState_COMMAND_STATE_CANCELLED, Reason: kind.ReasonCancelled})
			return
		}
	}
	if act.Kind == Fail {
		finish(&agentv1.CommandUpdate{State: agentv1.CommandState_COMMAND_STATE_FAILED, Reason: act.Reason, Result: act.Result})
		return
	}
	res := act.Result
	if res == nil {
		res = json.RawMessage(`{"ok":true}`)
	}
	finish(&agentv1.CommandUpdate{State: agentv1.CommandState_COMMAND_STATE_SUCCEEDED, Result: res})
}

// stateTerminal reports whether st ends a command.
func stateTerminal(st agentv1.CommandState) bool {
	switch st {
	case agentv1.CommandState_COMMAND_STATE_SUCCEEDED, agentv1.CommandState_COMMAND_STATE_FAILED,
		agentv1.CommandState_COMMAND_STATE_REJECTED, agentv1.CommandState_COMMAND_STATE_EXPIRED,
		agentv1.CommandState_COMMAND_STATE_CANCELLED:
		return true
	}
	return false
}
