package session

import (
	"context"
	"time"

	"google.golang.org/protobuf/proto"

	agentv1 "github.com/better-compute/commands/proto/bc/agent/v1"
)

// outgoing is an update kept until the gateway acknowledges it, with when
// it last went out (zero: never on a live session).
type outgoing struct {
	update *agentv1.CommandUpdate
	sent   time.Time
}

// resendLoop resends, within the live session, the updates the gateway has
// not acknowledged. The gateway acknowledges an update once it is stored,
// so one that stays unacknowledged did not land (its database was away, or
// the message was lost); resending only on a new session left such a result
// to the sweeper for as long as the session lived. An update is resent once
// it has waited the current wait without an acknowledgement; the wait
// starts at ResendMin, doubles to ResendMax while resends go unanswered,
// and starts over with each acknowledgement.
func (c *Client) resendLoop(ctx context.Context, stream agentv1.Session_ConnectClient) {
	wait := c.cfg.ResendMin
	next := time.Now().Add(Jitter(wait))
	t := time.NewTimer(time.Until(next))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-c.acked:
			// Start over, but never push back a resend already due sooner.
			wait = c.cfg.ResendMin
			if at := time.Now().Add(Jitter(wait)); at.Before(next) {
				next = at
				t.Reset(time.Until(next))
			}
			continue
		case <-t.C:
		}
		c.lock.Lock()
		due := c.toResend(wait)
		c.lock.Unlock()
		if len(due) > 0 {
			c.logger.Debug("resending unacknowledged updates", "count", len(due), "after", wait)
			c.sendLock.Lock()
			c.lock.Lock()
			current := c.stream == stream
			c.lock.Unlock()
			if current {
				c.resend(stream, due)
			}
			c.sendLock.Unlock()
			wait = min(2*wait, c.cfg.ResendMax)
		}
		next = time.Now().Add(Jitter(wait))
		t.Reset(time.Until(next))
	}
}

// toResend returns, in order, the unacknowledged updates that last went out
// at least age ago (or never). The caller holds lock.
func (c *Client) toResend(age time.Duration) []*outgoing {
	var out []*outgoing
	now := time.Now()
	for _, o := range c.unacked {
		if o.sent.IsZero() || now.Sub(o.sent) >= age {
			out = append(out, o)
		}
	}
	return out
}

// resend sends due on stream with the session's epoch and notes when each
// went out; it stops at the first failed send (the receive loop sees the
// broken stream). The caller holds sendLock.
func (c *Client) resend(stream agentv1.Session_ConnectClient, due []*outgoing) {
	c.lock.Lock()
	epoch := c.epoch
	c.lock.Unlock()
	for _, o := range due {
		c.lock.Lock()
		u := proto.Clone(o.update).(*agentv1.CommandUpdate)
		c.lock.Unlock()
		u.SessionEpoch = epoch
		if err := stream.Send(&agentv1.NodeMessage{Msg: &agentv1.NodeMessage_Update{Update: u}}); err != nil {
			return
		}
		c.lock.Lock()
		o.sent = time.Now()
		c.lock.Unlock()
	}
}

// ack takes the acknowledged update, and the earlier ones of its command,
// off unacked: an acknowledgement says the gateway stored the command's
// state as of that update.
func (c *Client) ack(a *agentv1.UpdateAck) {
	c.lock.Lock()
	defer c.lock.Unlock()
	kept := c.unacked[:0]
	for _, o := range c.unacked {
		if o.update.GetCommandId() == a.GetCommandId() && o.update.GetUpdateSeq() <= a.GetUpdateSeq() {
			continue
		}
		kept = append(kept, o)
	}
	removed := len(c.unacked) - len(kept)
	for i := len(kept); i < len(c.unacked); i++ {
		c.unacked[i] = nil
	}
	c.unacked = kept
	if removed > 0 {
		select {
		case c.acked <- struct{}{}:
		default:
		}
	}
}
