package gateway

import (
	"context"
	"time"

	"github.com/better-compute/commands/controlplane/internal/dbhealth"
)

// sweepChunk bounds the node ids of one sweep statement.
const sweepChunk = 5000

// sweepIdle wakes, every IdlePoll until ctx ends, the sessions whose nodes
// have open commands. A session whose last read found none, or only
// commands in flight, does not poll (waitsForWake): it waits for its
// node's NOTIFY, and this sweep is what brings it work whose wake-up was
// lost, in one statement for thousands of sessions. Sessions with a
// pending command or a cancel to resend poll on their own (Poll); waking
// them here too costs them one read.
func (g *Gateway) sweepIdle(ctx context.Context) {
	t := time.NewTicker(g.opts.IdlePoll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		g.sweepOnce(ctx)
	}
}

// sweepOnce is one pass of sweepIdle.
func (g *Gateway) sweepOnce(ctx context.Context) {
	ids, idle := g.hub.nodes()
	for start := 0; start < len(ids); start += sweepChunk {
		chunk := ids[start:min(start+sweepChunk, len(ids))]
		rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		open, err := g.queue.NodesWithOpen(rctx, g.pool, chunk)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			if dbhealth.Transient(err) {
				g.outage.Failed("sweeping idle sessions", err)
			} else {
				g.logger.Warn("sweeping idle sessions failed; trying again in the next sweep", "error", err, "every", g.opts.IdlePoll)
			}
			return
		}
		g.outage.OK()
		for _, id := range open {
			if idle[id] {
				// A lost NOTIFY, or one still on its way.
				g.logger.Debug("waking a session that waits for wake-ups; its node has an open command", "node_id", id)
			}
			g.hub.wake(id, false, false)
		}
	}
}
