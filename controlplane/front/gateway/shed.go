package gateway

import (
	"context"
	"math/rand/v2"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/better-compute/commands/controlplane/fleet/gateways"
	"github.com/better-compute/commands/controlplane/internal/dbhealth"
)

// ShedOptions tune how a gateway evens out its load with the other
// gateways on the same database. Sessions do not move by themselves: a
// gateway that came back after a restart (or was added) gets only new
// sessions, while the others keep the nodes that re-homed to them. So
// every Every each gateway records how many sessions it holds (the
// gateways table) and, when it held more than Above times the mean over
// the live gateways, and at least Least more than the mean, in two rounds
// in a row with every other gateway's row written again in between (a
// gateway killed with -9 writes no more: its stale count holds shedding
// back), ends half of what it holds beyond the mean, at most Most in one
// round: the others' counts are up to a round old, so going half the way
// a round keeps the overshoot small. A shed node's bcd reconnects after its shortest
// backoff (about a second) through the load balancer; a node that lands
// on a gateway still above its share is shed again in a later round. What
// was in flight on a shed session is replayed on the next, and the node's
// journal answers what it already ran, so nothing runs twice.
type ShedOptions struct {
	// Off keeps this gateway from ending sessions; it still records its
	// count, so the others see what it holds.
	Off bool
	// Every is how often the gateway records its count and compares it
	// with the others' (10s). A gateway whose row is older than three
	// times Every no longer counts: it died.
	Every time.Duration
	// Above is the trigger: more than Above times the mean (1.1). Only a
	// gateway above it sheds (one below has no way to pull sessions), so
	// Above also bounds how uneven the load stays: with three gateways,
	// none above 1.1 times the mean leaves none below 0.8 times it.
	Above float64
	// Least is the smallest excess over the mean that is shed (16): a few
	// sessions more than the mean are not worth a reconnect.
	Least int
	// Most bounds the sessions ended in one round (0: a tenth of those
	// held, or Least when that is more), so that a large excess moves over several
	// rounds and the others take the reconnects spread out.
	Most int
}

func (o *ShedOptions) defaults() {
	if o.Every <= 0 {
		o.Every = 10 * time.Second
	}
	if o.Above <= 1 {
		o.Above = 1.1
	}
	if o.Least <= 0 {
		o.Least = 16
	}
}

// errShed is how a session that the gateway ended to even out the load
// ends: Unavailable, which bcd answers by reconnecting after its shortest
// backoff.
var errShed = status.Error(codes.Unavailable, "this gateway holds more than its share of the fleet's sessions and ended this one to even out the load: reconnect through the load balancer (any gateway serves any node)")

// Shed is how many sessions this gateway ended to even out the load.
func (g *Gateway) Shed() int64 { return g.shed.Load() }

// ID is this gateway's row in the gateways table.
func (g *Gateway) ID() string { return g.id }

// balance records the gateway's session count every Shed.Every and sheds
// what it holds beyond its share, until ctx ends; then it removes its row,
// so that the others stop counting it at once.
func (g *Gateway) balance(ctx context.Context) {
	defer func() {
		lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), endSessionTimeout)
		defer cancel()
		if err := gateways.Leave(lctx, g.pool, g.id); err != nil {
			g.logger.Warn("removing this gateway's row (the others stop counting it once it is stale)", "error", err)
		}
	}()
	every := g.opts.Shed.Every
	for {
		// Jittered, so that gateways started together do not compare in
		// the same instant, each before the others' sheds landed.
		t := time.NewTimer(every*4/5 + rand.N(every*2/5+1))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		if err := g.balanceOnce(ctx); err != nil && ctx.Err() == nil {
			if dbhealth.Transient(err) {
				g.outage.Failed("recording this gateway's sessions", err)
			} else {
				g.logger.Warn("evening out the load across gateways", "error", err)
			}
		}
	}
}

// balanceOnce records the count and sheds the excess, once.
func (g *Gateway) balanceOnce(ctx context.Context) error {
	// What the last round saw goes with this round whatever happens: an
	// error leaves nothing to compare the next round with.
	prev := g.lastSeen
	g.lastSeen = nil
	ctx, cancel := context.WithTimeout(ctx, g.opts.Shed.Every)
	defer cancel()
	held := g.hub.held()
	if err := gateways.Beat(ctx, g.pool, g.id, g.opts.Name, held); err != nil {
		return err
	}
	g.outage.OK()
	if g.opts.Shed.Off {
		return nil
	}
	live, err := gateways.Live(ctx, g.pool, 3*g.opts.Shed.Every)
	if err != nil {
		return err
	}
	counts := make([]int, 0, len(live))
	seen := make(map[string]time.Time, len(live))
	for _, gw := range live {
		counts = append(counts, gw.Sessions)
		seen[gw.ID] = gw.SeenAt
	}
	n := gateways.Excess(held, counts, g.opts.Shed.Above, g.opts.Shed.Least)
	if n <= 0 {
		return nil
	}
	g.lastSeen = seen
	// Only an excess seen in two rounds in a row, with every other
	// gateway's row written again in between, is shed. While a fleet
	// connects (or re-homes) the others' counts lag behind the sessions
	// arriving, and one round's excess may be gone by the next; and a
	// gateway killed with -9 leaves a row that still counts its sessions
	// until it goes stale, while they already arrive here: its row, not
	// written again, holds the shedding back.
	if !freshSince(prev, seen, g.id) {
		return nil
	}
	// Half the excess a round: every loaded gateway acts on the others'
	// counts, up to a round old, and the sessions it ends land on a
	// gateway whose row does not show them yet; going half the way each
	// round keeps the overshoot small.
	n = (n + 1) / 2
	most := g.opts.Shed.Most
	if most <= 0 {
		most = max(g.opts.Shed.Least, held/10)
	}
	n = min(n, most)
	ended := g.hub.shed(n)
	g.shed.Add(int64(ended))
	g.logger.Info("ending sessions to even out the load across gateways", "held", held, "gateways", len(live), "fleet_sessions", sum(counts), "ending", ended)
	return nil
}

// freshSince says that the last round saw the same gateways as this one
// and that every other gateway wrote its row again since: what this round
// read is their count now, not a dead gateway's last word.
func freshSince(prev, now map[string]time.Time, self string) bool {
	if len(prev) == 0 || len(prev) != len(now) {
		return false
	}
	for id, at := range now {
		before, ok := prev[id]
		if !ok || (id != self && !at.After(before)) {
			return false
		}
	}
	return true
}

func sum(ns []int) int {
	t := 0
	for _, n := range ns {
		t += n
	}
	return t
}

// held counts the sessions not already marked to end: one marked in an
// earlier round that has not ended yet is not shed again.
func (h *hub) held() int {
	h.lock.Lock()
	defer h.lock.Unlock()
	n := 0
	for _, s := range h.sessions {
		for w := range s {
			if !w.shed.Load() {
				n++
			}
		}
	}
	return n
}

// shed marks up to n sessions to end, those waiting for a wake-up first
// (nothing pending to send them: the cheapest to move), and wakes them; it
// returns how many it marked.
func (h *hub) shed(n int) int {
	h.lock.Lock()
	defer h.lock.Unlock()
	marked := 0
	for _, idleFirst := range []bool{true, false} {
		for _, s := range h.sessions {
			for w := range s {
				if marked == n {
					return marked
				}
				if w.idle.Load() != idleFirst || w.shed.Load() {
					continue
				}
				w.shed.Store(true)
				select {
				case w.ch <- struct{}{}:
				default:
				}
				marked++
			}
		}
	}
	return marked
}
