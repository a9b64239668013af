package session

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/better-compute/commands/bcd/accept"
	"github.com/better-compute/commands/bcd/daemon"
	"github.com/better-compute/commands/bcd/journal"
	agentv1 "github.com/better-compute/commands/proto/bc/agent/v1"
)

// DecodeCommand reads the command from the envelope's exact bytes; the
// envelope goes along for the signature checks.
func DecodeCommand(env *agentv1.CommandEnvelope) (accept.Command, error) {
	var pc agentv1.Command
	if err := proto.Unmarshal(env.GetCommand(), &pc); err != nil {
		return accept.Command{}, fmt.Errorf("command envelope: %w", err)
	}
	if pc.GetId() == "" {
		return accept.Command{}, errors.New("command envelope: a command without an id")
	}
	cmd := accept.Command{
		ID: pc.GetId(), NodeID: pc.GetNodeId(), Seq: pc.GetSeq(), Kind: pc.GetKind(), Payload: pc.GetPayload(),
		MinGeneration: pc.GetMinGeneration(), BatchID: pc.GetBatchId(), Envelope: env, SecretRefs: pc.GetSecretRefs(),
	}
	if pc.GetNotAfter() != nil {
		cmd.NotAfter = pc.GetNotAfter().AsTime()
	}
	return cmd, nil
}

// command hands a received command to the daemon. The daemon's acceptance
// runs the checks (node id, expiry in server time, generation, ...); a
// duplicate is answered from the journal or re-attached, and only those
// answers come back on Submit's channel alone: everything else reaches the
// daemon-wide subscription.
func (c *Client) command(ctx context.Context, env *agentv1.CommandEnvelope) {
	cmd, err := DecodeCommand(env)
	if err != nil {
		c.logger.Error("ignoring a command that does not decode", "error", err)
		return
	}
	ch, err := c.d.Submit(ctx, cmd)
	if err != nil {
		c.logger.Warn("command not submitted; the gateway will replay it", "command_id", cmd.ID, "error", err)
		return
	}
	go func() {
		for u := range ch {
			if u.Duplicate {
				c.report(u)
			}
		}
	}()
}

// forward reports every update the daemon publishes until ctx ends.
func (c *Client) forward(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case u, ok := <-c.subs:
			if !ok {
				return
			}
			c.report(u)
		}
	}
}

// report turns a daemon update into a CommandUpdate with the next
// update_seq, keeps state changes until acknowledged, and sends it when a
// session is open. Progress steps are not kept: the next supersedes them.
func (c *Client) report(u daemon.Update) {
	cu := ToProto(u)
	c.sendLock.Lock()
	c.lock.Lock()
	c.seq++
	cu.UpdateSeq = c.seq
	cu.SessionEpoch = c.epoch
	var kept *outgoing
	if u.Progress == nil {
		kept = &outgoing{update: cu}
		c.unacked = append(c.unacked, kept)
	}
	s := c.stream
	c.lock.Unlock()
	if s != nil {
		if err := s.Send(&agentv1.NodeMessage{Msg: &agentv1.NodeMessage_Update{Update: proto.Clone(cu).(*agentv1.CommandUpdate)}}); err != nil {
			c.logger.Debug("update not sent; it is resent on the next session", "command_id", u.CommandID, "error", err)
		} else if kept != nil {
			c.lock.Lock()
			kept.sent = time.Now()
			c.lock.Unlock()
		}
	}
	c.sendLock.Unlock()
	if u.Terminal() {
		// An outcome may have changed the inventory (inventory.refresh
		// calls PutInventory) or the conditions.
		c.kickStatus()
	}
}

var stateOf = map[journal.State]agentv1.CommandState{
	journal.StateAccepted:  agentv1.CommandState_COMMAND_STATE_ACKED,
	journal.StateRunning:   agentv1.CommandState_COMMAND_STATE_RUNNING,
	journal.StateSucceeded: agentv1.CommandState_COMMAND_STATE_SUCCEEDED,
	journal.StateFailed:    agentv1.CommandState_COMMAND_STATE_FAILED,
	journal.StateRejected:  agentv1.CommandState_COMMAND_STATE_REJECTED,
	journal.StateExpired:   agentv1.CommandState_COMMAND_STATE_EXPIRED,
	journal.StateCancelled: agentv1.CommandState_COMMAND_STATE_CANCELLED,
}

var codeOf = map[accept.Code]agentv1.RejectCode{
	accept.Unsupported:     agentv1.RejectCode_REJECT_CODE_UNSUPPORTED,
	accept.StaleGeneration: agentv1.RejectCode_REJECT_CODE_STALE_GENERATION,
	accept.Expired:         agentv1.RejectCode_REJECT_CODE_EXPIRED,
	accept.BadSignature:    agentv1.RejectCode_REJECT_CODE_BAD_SIGNATURE,
	accept.BatchUnapproved: agentv1.RejectCode_REJECT_CODE_BATCH_UNAPPROVED,
	accept.UnbatchedLimit:  agentv1.RejectCode_REJECT_CODE_UNBATCHED_LIMIT,
	accept.Busy:            agentv1.RejectCode_REJECT_CODE_BUSY,
}

// ToProto is a daemon update as the session's CommandUpdate (without
// update_seq and session_epoch, which the client sets). A refusal carries
// its reject code as its reason, a bare code, and the explanation as its
// message.
func ToProto(u daemon.Update) *agentv1.CommandUpdate {
	cu := &agentv1.CommandUpdate{
		CommandId: u.CommandID,
		State:     stateOf[u.State],
		Reason:    u.Reason,
		Message:   u.Message,
		Rebooted:  u.Rebooted,
		NodeSig:   append([]byte(nil), u.NodeSig...),
	}
	if u.State == journal.StateRejected {
		cu.RejectCode = codeOf[u.RejectCode]
		if u.RejectCode != "" {
			cu.Reason = string(u.RejectCode)
		}
	}
	if len(u.Result) > 0 {
		cu.Result = append([]byte(nil), u.Result...)
		if sum, err := hex.DecodeString(u.ResultSHA256); err == nil && len(sum) > 0 {
			cu.ResultSha256 = sum
		}
	}
	if u.Progress != nil {
		cu.ProgressPercent = int32(u.Progress.Percent)
		cu.ProgressMessage = u.Progress.Message
	}
	return cu
}
