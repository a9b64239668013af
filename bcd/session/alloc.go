package session

import (
	"context"
	"encoding/json"
	"slices"

	"github.com/better-compute/commands/internal/trust"
	agentv1 "github.com/better-compute/commands/proto/bc/agent/v1"
	"github.com/better-compute/commands/sdk/nodespec"
)

// AllocationBounds are the statements a node makes for a spec it applied:
// one per allocation that a live hold binds GPUs to (whole, or through a
// MIG instance or a slot), naming the physical GPUs sorted and once each.
// "A reservation goes active only once the node's own signed
// AllocationBound verifies": the gateway cannot claim a binding the node
// never applied.
func AllocationBounds(nodeID string, generation int64, doc json.RawMessage) ([]trust.AllocationBound, error) {
	spec, err := nodespec.Parse(doc)
	if err != nil {
		return nil, err
	}
	gpus := map[string][]string{}
	var order []string
	for _, h := range spec.Holds {
		if h.State != nodespec.HoldLive || h.Allocation == "" || h.GPU == "" {
			continue
		}
		if _, ok := gpus[h.Allocation]; !ok {
			order = append(order, h.Allocation)
		}
		gpus[h.Allocation] = append(gpus[h.Allocation], h.GPU)
	}
	slices.Sort(order)
	out := make([]trust.AllocationBound, 0, len(order))
	for _, a := range order {
		g := gpus[a]
		slices.Sort(g)
		out = append(out, trust.AllocationBound{Allocation: a, NodeID: nodeID, GPUs: slices.Compact(g), Generation: generation})
	}
	return out, nil
}

// sendAllocationBounds signs and sends the AllocationBound statements of an
// applied spec generation. Without a node key there is nothing to sign
// with, and nothing is sent.
func (c *Client) sendAllocationBounds(generation int64, doc json.RawMessage) {
	if c.cfg.NodeKey == nil || generation < 1 {
		return
	}
	bounds, err := AllocationBounds(c.cfg.NodeID, generation, doc)
	if err != nil {
		c.logger.Warn("the applied node spec does not parse: no AllocationBound sent", "generation", generation, "error", err)
		return
	}
	for _, b := range bounds {
		body, err := b.Encode()
		if err != nil {
			c.logger.Error("cannot encode an AllocationBound", "allocation", b.Allocation, "error", err)
			continue
		}
		sig, err := trust.SignWith(c.cfg.NodeKey, trust.PurposeAllocationBound, body)
		if err != nil {
			c.logger.Error("cannot sign an AllocationBound", "allocation", b.Allocation, "error", err)
			continue
		}
		if !c.send(&agentv1.NodeMessage{Msg: &agentv1.NodeMessage_AllocationBound{AllocationBound: &agentv1.AllocationBound{Statement: body, NodeSig: sig}}}) {
			return
		}
		c.logger.Debug("allocation bound sent", "allocation", b.Allocation, "generation", generation, "gpus", len(b.GPUs))
	}
}

// resendAllocationBounds sends, on a new session, the statements of the
// applied generation: the last session may have ended before they landed.
func (c *Client) resendAllocationBounds(ctx context.Context) {
	gen, doc, _ := c.d.State().NodeSpec(ctx)
	c.sendAllocationBounds(gen, doc)
}
