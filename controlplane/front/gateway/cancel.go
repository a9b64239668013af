package gateway

import (
	"time"

	"github.com/better-compute/commands/controlplane/commands/queue"
	agentv1 "github.com/better-compute/commands/proto/bc/agent/v1"
)

// resendCancel sends Cancel for an in-flight command whose cancel was
// requested, again every CancelResend: "the gateway sends Cancel until the
// daemon reports a terminal state". A Cancel can be lost with a session or
// arrive before the command itself, and the daemon ignores a repeat, so
// repeating it is what makes the cancel reach the node.
func (s *session) resendCancel(c queue.Command, now time.Time) error {
	if c.CancelRequestedAt == nil || now.Sub(s.cancelSent[c.ID]) < s.g.opts.CancelResend {
		return nil
	}
	s.cancelSent[c.ID] = now
	return s.send(&agentv1.GatewayMessage{Msg: &agentv1.GatewayMessage_Cancel{Cancel: &agentv1.Cancel{CommandId: c.ID}}})
}
