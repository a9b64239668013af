package trust

import (
	"sync"
	"time"
)

// Clock is the node's view of server time. The gateway's Welcome claims a
// server time, but the gateway is not trusted blindly: an offset from the
// node's own clock beyond MaxSkew is refused (Offset reports it, and the
// node's own clock is used), and time never reads earlier than the latest
// signed time the node has verified (a command's signing time, a bundle's
// issue time), which is a lower bound of the true time. So a gateway that
// claims it is 48 hours earlier cannot make an expired command look fresh.
type Clock struct {
	// MaxSkew bounds the offset a Welcome may apply; DefaultClockSkew when
	// zero.
	MaxSkew time.Duration
	// Now is the node's clock; time.Now when nil.
	Now func() time.Time

	lock     sync.Mutex
	offset   time.Duration
	refused  time.Duration
	floor    time.Time
	observed bool
}

func (c *Clock) now() time.Time {
	if c.Now != nil {
		return c.Now()
	}
	return time.Now()
}

func (c *Clock) maxSkew() time.Duration {
	if c.MaxSkew > 0 {
		return c.MaxSkew
	}
	return DefaultClockSkew
}

// ObserveServerTime takes a Welcome's server time. It returns the offset
// applied and, when the claimed offset was beyond MaxSkew and refused, that
// offset (zero otherwise).
func (c *Clock) ObserveServerTime(server time.Time) (applied, refused time.Duration) {
	off := server.Sub(c.now())
	c.lock.Lock()
	defer c.lock.Unlock()
	c.observed = true
	if off > c.maxSkew() || off < -c.maxSkew() {
		c.offset, c.refused = 0, off
		return 0, off
	}
	c.offset, c.refused = off, 0
	return off, 0
}

// ApplyServerTime takes a Welcome's server time whatever the offset, for a
// node whose trust bundle holds no command-signing root: there the gateway
// is trusted anyway, and the spec's "the daemon keeps the offset from
// Welcome.server_time" holds as it did before signing. It returns the
// offset applied.
func (c *Clock) ApplyServerTime(server time.Time) time.Duration {
	off := server.Sub(c.now())
	c.lock.Lock()
	defer c.lock.Unlock()
	c.observed = true
	c.offset, c.refused = off, 0
	return off
}

// MaxOffset is the largest offset ObserveServerTime applies.
func (c *Clock) MaxOffset() time.Duration { return c.maxSkew() }

// Offset is the applied offset and the last refused one.
func (c *Clock) Offset() (applied, refused time.Duration) {
	c.lock.Lock()
	defer c.lock.Unlock()
	return c.offset, c.refused
}

// ObserveSigned raises the floor to t, a time a trusted key signed.
func (c *Clock) ObserveSigned(t time.Time) {
	c.lock.Lock()
	defer c.lock.Unlock()
	if t.After(c.floor) {
		c.floor = t
	}
}

// Floor is the latest signed time observed.
func (c *Clock) Floor() time.Time {
	c.lock.Lock()
	defer c.lock.Unlock()
	return c.floor
}

// ServerNow is the node's clock plus the applied offset, never earlier than
// the floor.
func (c *Clock) ServerNow() time.Time {
	n := c.now()
	c.lock.Lock()
	defer c.lock.Unlock()
	t := n.Add(c.offset)
	if t.Before(c.floor) {
		return c.floor
	}
	return t
}
