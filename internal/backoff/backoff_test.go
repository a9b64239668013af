package backoff_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/internal/backoff"
)

// The waits double from the minimum, within the jitter, up to the maximum.
func TestNewDoublesWithinTheJitterUpToTheMaximum(t *testing.T) {
	b := backoff.New(100*time.Millisecond, 800*time.Millisecond)
	for _, base := range []time.Duration{100, 200, 400, 800, 800} {
		base *= time.Millisecond
		got := b.NextBackOff()
		require.GreaterOrEqual(t, got, time.Duration(float64(base)*(1-backoff.Jitter)))
		require.LessOrEqual(t, got, time.Duration(float64(base)*(1+backoff.Jitter)))
	}
}

// A connection that got going resets the backoff: the next wait is the
// minimum again, not the doubled one (events.Listen never reset before).
func TestLoopResetsAfterAConnectionThatGotGoing(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var waits []time.Duration
	runs := 0
	backoff.Loop(ctx, time.Millisecond, time.Second, func(context.Context) (bool, error) {
		runs++
		return runs == 4, errors.New("lost")
	}, func(err error, wait time.Duration) {
		require.EqualError(t, err, "lost")
		waits = append(waits, wait)
		if len(waits) == 5 {
			cancel()
		}
	})
	require.Len(t, waits, 5)
	base := []time.Duration{1, 2, 4, 1, 2} // the 4th run progressed
	for i, w := range waits {
		b := base[i] * time.Millisecond
		require.GreaterOrEqual(t, w, time.Duration(float64(b)*(1-backoff.Jitter)), "wait %d", i)
		require.LessOrEqual(t, w, time.Duration(float64(b)*(1+backoff.Jitter)), "wait %d", i)
	}
}

// Nth is the n-th wait of a fresh backoff: 1, 2, 4, … the minimum, capped.
func TestNthCountsFromTheMinimum(t *testing.T) {
	for n, base := range map[int]time.Duration{1: 10, 2: 20, 3: 40, 9: 80} {
		base *= time.Millisecond
		got := backoff.Nth(10*time.Millisecond, 80*time.Millisecond, n)
		require.GreaterOrEqual(t, got, time.Duration(float64(base)*(1-backoff.Jitter)), "n=%d", n)
		require.LessOrEqual(t, got, time.Duration(float64(base)*(1+backoff.Jitter)), "n=%d", n)
	}
}

// Loop waits what it reports, on the clock: in a synctest bubble, where time
// moves only when every goroutine waits, a minute's backoff passes at once
// and the gap between two attempts is exactly the wait Loop reported (a
// reconnect loop that reported one wait and slept another, or none, would
// hammer a server that is down).
func TestLoopWaitsWhatItReports(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		var (
			attempts []time.Time
			waits    []time.Duration
		)
		backoff.Loop(ctx, 10*time.Second, time.Minute, func(context.Context) (bool, error) {
			attempts = append(attempts, time.Now())
			if len(attempts) == 6 {
				cancel()
			}
			return false, errors.New("down")
		}, func(_ error, wait time.Duration) { waits = append(waits, wait) })
		require.Len(t, attempts, 6)
		for i := 1; i < len(attempts); i++ {
			require.Equal(t, waits[i-1], attempts[i].Sub(attempts[i-1]), "the gap before attempt %d", i+1)
		}
		require.LessOrEqual(t, waits[4], time.Duration(float64(time.Minute)*(1+backoff.Jitter)), "capped at the maximum")
		require.GreaterOrEqual(t, waits[4], time.Duration(float64(time.Minute)*(1-backoff.Jitter)), "doubled up to the maximum: 10, 20, 40, 60, 60 s")
	})
}
