package session

import (
	"errors"
	"fmt"
	"time"

	"github.com/better-compute/commands/bcd/conditions"
	"github.com/better-compute/commands/bcd/truststore"
	"github.com/better-compute/commands/internal/trust"
	agentv1 "github.com/better-compute/commands/proto/bc/agent/v1"
	"github.com/better-compute/commands/sdk/kind"
)

// welcomeTrust takes what a Welcome says that the node must not believe
// blindly: its trust bundle is offered to the store, which keeps the one it
// has unless a root it trusts signed a higher version; its server time
// moves the node's clock only within maxClockSkew once the bundle holds
// command-signing roots. Either refusal is reported as a condition.
func (c *Client) welcomeTrust(w *agentv1.Welcome) {
	clock := c.d.Clock()
	if st := c.cfg.Trust; st != nil {
		if wire := w.GetTrustBundle().GetSigned(); len(wire) > 0 {
			if _, err := st.Offer(wire, clock.ServerNow()); err != nil {
				c.bundleRefused(err)
			} else {
				c.bundleHeld()
			}
		} else {
			c.bundleHeld()
		}
		// A bundle's issue time is a signed lower bound of the true time.
		if b := st.Bundle(); b != nil {
			clock.ObserveSigned(b.IssuedAt)
		}
	}
	if w.GetServerTime() != nil {
		c.serverTime(w.GetServerTime().AsTime())
	}
}

// bundleHeld reports the bundle the node holds after a Welcome that brought
// no refused one.
func (c *Client) bundleHeld() {
	c.lastRefusal = ""
	v := c.cfg.Trust.Version()
	cd := kind.Condition{Type: conditions.TypeTrustBundle, Status: true, Reason: conditions.ReasonAccepted,
		Message: fmt.Sprintf("trust bundle version %d", v)}
	switch {
	case v == 0 && c.cfg.Trust.Anchored():
		cd = kind.Condition{Type: conditions.TypeTrustBundle, Reason: conditions.ReasonNone,
			Message: "no trust bundle yet: commands and node specs must be signed by a worker key that a trust anchor (trustAnchors) certified"}
	case v == 0:
		cd = kind.Condition{Type: conditions.TypeTrustBundle, Reason: conditions.ReasonNone,
			Message: "no trust bundle: commands and node specs go unsigned"}
	case !c.cfg.Trust.HasCommandSigningRoots():
		cd.Message += " (no command-signing roots: commands and node specs go unsigned)"
	}
	c.own.put(cd)
}

// bundleRefused reports a refused bundle; the log has it once per distinct
// refusal, since a gateway that keeps offering it would repeat it on every
// reconnect.
func (c *Client) bundleRefused(err error) {
	code := bundleRefusalCode(err)
	held := c.cfg.Trust.Version()
	msg := fmt.Sprintf("the Welcome's trust bundle was refused, version %d kept: %v", held, err)
	c.own.put(kind.Condition{Type: conditions.TypeTrustBundle, Reason: code, Message: msg})
	if key := code + "\x00" + err.Error(); key != c.lastRefusal {
		c.lastRefusal = key
		c.logger.Warn("trust bundle refused; keeping the one held", "reason", code, "kept_version", held, "error", err)
	}
}

// bundleRefusalCode is a refused bundle's reason, a bare code.
func bundleRefusalCode(err error) string {
	switch {
	case errors.Is(err, trust.ErrBundleRollback):
		return conditions.ReasonRollback
	case errors.Is(err, trust.ErrBundleConflict):
		return conditions.ReasonConflict
	case errors.Is(err, truststore.ErrNoBundle):
		return conditions.ReasonNoAnchor
	case errors.Is(err, trust.ErrMalformed):
		return conditions.ReasonMalformed
	case errors.Is(err, trust.ErrUnknownKey), errors.Is(err, trust.ErrBadSignature), errors.Is(err, trust.ErrExpired):
		return conditions.ReasonUnverified
	}
	return conditions.ReasonError
}

// hasRoots reports whether commands and specs must be signed.
func (c *Client) hasRoots() bool {
	return c.cfg.Trust != nil && c.cfg.Trust.HasCommandSigningRoots()
}

// serverTime takes a Welcome's server time. With command-signing roots an
// offset beyond maxClockSkew is refused: a gateway that claims the time is
// 48 hours earlier must not make an expired command look fresh. Without
// them the gateway is trusted anyway and the offset is kept, as the spec
// says ("the daemon keeps the offset from Welcome.server_time"); a large
// one is still reported.
func (c *Client) serverTime(server time.Time) {
	clock := c.d.Clock()
	limit := clock.MaxOffset()
	var off time.Duration
	refused := false
	if c.hasRoots() {
		applied, r := clock.ObserveServerTime(server)
		off, refused = applied, r != 0
		if refused {
			off = r
		}
	} else {
		off = clock.ApplyServerTime(server)
	}
	figure := describeOffset(off)
	cd := kind.Condition{Type: conditions.TypeClockSkew,
		Message: fmt.Sprintf("the gateway's server time is %s, within maxClockSkew %s", figure, limit)}
	switch {
	case refused:
		cd = kind.Condition{Type: conditions.TypeClockSkew, Status: true, Reason: conditions.ReasonRefused,
			Message: fmt.Sprintf("the gateway's server time is %s, beyond maxClockSkew %s: refused, the node's own clock is used (check the node's clock and the gateway's)", figure, limit)}
		c.logger.Warn("the Welcome's server time is beyond maxClockSkew: refused, using the node's own clock", "offset", off, "max_clock_skew", limit)
	case off > limit || off < -limit:
		cd = kind.Condition{Type: conditions.TypeClockSkew, Status: true, Reason: conditions.ReasonApplied,
			Message: fmt.Sprintf("the gateway's server time is %s, beyond maxClockSkew %s: applied, since the trust bundle holds no command-signing roots (check the node's clock and the gateway's)", figure, limit)}
		c.logger.Warn("the Welcome's server time is beyond maxClockSkew; applied, since the trust bundle holds no command-signing roots", "offset", off, "max_clock_skew", limit)
	}
	c.own.put(cd)
}

// describeOffset says how far the server's clock is from the node's: to
// the millisecond within a minute, to the second beyond, where the round
// trip's milliseconds are noise.
func describeOffset(off time.Duration) string {
	abs := off
	if abs < 0 {
		abs = -abs
	}
	if abs >= time.Minute {
		abs = abs.Round(time.Second)
	} else {
		abs = abs.Round(time.Millisecond)
	}
	switch {
	case abs == 0:
		return "equal to this node's clock"
	case off > 0:
		return fmt.Sprintf("%s ahead of this node's clock", abs)
	}
	return fmt.Sprintf("%s behind this node's clock", abs)
}
