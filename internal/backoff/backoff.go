// Package backoff is the one reconnect backoff of the control plane and
// bcd: exponential (doubling), with jitter so that many clients that lost
// one server do not return in step, and reset once a connection got going,
// so a blip after a good hour waits the minimum again. It wraps
// github.com/cenkalti/backoff/v5 rather than hand-writing the arithmetic
// in each loop (issue 32 counted eight such loops, one that never reset).
package backoff

import (
	"context"
	"time"

	cb "github.com/cenkalti/backoff/v5"
)

// Jitter is the randomization factor every backoff here uses: each wait
// is the interval ±20%.
const Jitter = 0.2

// Exponential is the backoff New returns: NextBackOff for the next wait,
// Reset once a connection got going.
type Exponential = cb.ExponentialBackOff

// New returns a doubling backoff from min to max with Jitter.
func New(minWait, maxWait time.Duration) *Exponential {
	b := &cb.ExponentialBackOff{InitialInterval: minWait, RandomizationFactor: Jitter, Multiplier: 2, MaxInterval: maxWait}
	b.Reset()
	return b
}

// Loop runs once until ctx ends, waiting the backoff between runs: once
// returns when its connection ended, with progressed true when it got
// going first (then the backoff starts again at minWait) and the error
// that ended it; lost, when set, is told of each end and the wait that
// follows (for the caller's log).
func Loop(ctx context.Context, minWait, maxWait time.Duration, once func(context.Context) (progressed bool, err error), lost func(err error, wait time.Duration)) {
	b := New(minWait, maxWait)
	for ctx.Err() == nil {
		progressed, err := once(ctx)
		if ctx.Err() != nil {
			return
		}
		if progressed {
			b.Reset()
		}
		wait := b.NextBackOff()
		if lost != nil {
			lost(err, wait)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// Nth is the n-th wait (n from 1) of New(minWait, maxWait), for a caller
// whose attempt count lives elsewhere (a command's attempts in
// PostgreSQL, a plugin's restarts).
func Nth(minWait, maxWait time.Duration, n int) time.Duration {
	b := New(minWait, maxWait)
	for range n - 1 {
		b.NextBackOff()
	}
	return b.NextBackOff()
}
