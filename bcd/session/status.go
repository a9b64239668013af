package session

import (
	"context"
	"encoding/json"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	agentv1 "github.com/better-compute/commands/proto/bc/agent/v1"
	"github.com/better-compute/commands/sdk/kind"
	"github.com/better-compute/commands/sdk/nodespec"
)

// statusLoop sends NodeStatus when the session opens and whenever the
// inventory or the conditions change: checked after each outcome, after a
// spec is applied, and every StatusEvery.
func (c *Client) statusLoop(ctx context.Context) {
	c.sendStatus(ctx)
	t := time.NewTicker(c.cfg.StatusEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-c.statusKick:
		}
		c.sendStatus(ctx)
	}
}

// sendStatus sends the inventory when it changed since the last NodeStatus
// of this session (empty means unchanged) and the conditions when they
// changed; the first of a session always goes.
func (c *Client) sendStatus(ctx context.Context) {
	st := c.d.State()
	inv, at, _ := st.Inventory(ctx)
	conds := c.conditions(ctx)
	key, _ := json.Marshal(conds)
	c.lock.Lock()
	first := !c.sentOnce
	invChanged := !at.Equal(c.lastInv)
	condChanged := string(key) != c.lastCond
	c.lock.Unlock()
	if !first && !invChanged && !condChanged {
		return
	}
	msg := &agentv1.NodeStatus{}
	if (first || invChanged) && len(inv) > 0 {
		msg.Inventory = inv
	}
	for _, cd := range conds {
		nc := &agentv1.NodeCondition{Type: cd.Type, Status: cd.Status, Reason: cd.Reason, Message: cd.Message}
		if !cd.Since.IsZero() {
			nc.Since = timestamppb.New(cd.Since)
		}
		msg.Conditions = append(msg.Conditions, nc)
	}
	if !c.send(&agentv1.NodeMessage{Msg: &agentv1.NodeMessage_Status{Status: msg}}) {
		return
	}
	c.lock.Lock()
	c.sentOnce, c.lastInv, c.lastCond = true, at, string(key)
	c.lock.Unlock()
	c.logger.Debug("node status sent", "inventory", len(msg.Inventory) > 0, "conditions", len(conds))
}

// conditions are the detector's, from the applied spec, beside those the
// plugins set through the host service.
func (c *Client) conditions(ctx context.Context) []kind.Condition {
	st := c.d.State()
	_, raw, _ := st.NodeSpec(ctx)
	var spec nodespec.Spec
	if len(raw) > 0 {
		if s, err := nodespec.Parse(raw); err == nil {
			spec = s
		}
	}
	out := append(c.cfg.Conditions.Current(ctx, spec), c.own.list()...)
	seen := map[string]bool{}
	for _, cd := range out {
		seen[cd.Type] = true
	}
	set, _ := st.Conditions(ctx)
	for _, cd := range set {
		if !seen[cd.Type] {
			out = append(out, cd)
		}
	}
	return out
}
