package signing

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/internal/trust"
)

type fakeClock struct {
	lock sync.Mutex
	t    time.Time
}

func (c *fakeClock) Now() time.Time { c.lock.Lock(); defer c.lock.Unlock(); return c.t }
func (c *fakeClock) Add(d time.Duration) {
	c.lock.Lock()
	defer c.lock.Unlock()
	c.t = c.t.Add(d)
}

// "Worker keys are renewed before expiry (overlap, no restart, no command
// left unsigned)": across two days of signing, every signature verifies at
// its signing time and for an hour after (a command's longest wait), and
// the key changes before the old one expires.
func TestAuthority_RenewsWorkerKeysBeforeExpiryWithOverlap(t *testing.T) {
	_, root, err := trust.NewEd25519()
	require.NoError(t, err)
	clk := &fakeClock{t: time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)}
	a, err := New(root, Options{Now: clk.Now})
	require.NoError(t, err)
	b := &trust.Bundle{Version: 1, Roots: []trust.Root{{PublicKey: a.RootPublic()}}}

	keys := map[string]bool{}
	for i := 0; i < 48*4; i++ { // every 15 minutes for 48 hours
		body := []byte{byte(i)}
		sig, cert, err := a.Sign(trust.PurposeCommand, body)
		require.NoError(t, err)
		wc, err := trust.VerifyWorkerSigned(b, cert, trust.PurposeCommand, body, sig, clk.Now())
		require.NoError(t, err, "at %s", clk.Now())
		_, err = trust.VerifyWorkerSigned(b, cert, trust.PurposeCommand, body, sig, clk.Now().Add(time.Hour))
		require.NoError(t, err, "an hour after %s", clk.Now())
		require.GreaterOrEqual(t, wc.NotAfter.Sub(clk.Now()), 12*time.Hour-time.Second)
		keys[wc.KeyID()] = true
		clk.Add(15 * time.Minute)
	}
	require.GreaterOrEqual(t, len(keys), 4, "renewed about every 12 hours")
}

func TestAuthority_RefusesALifetimeOverADay(t *testing.T) {
	_, root, err := trust.NewEd25519()
	require.NoError(t, err)
	_, err = New(root, Options{Lifetime: 25 * time.Hour})
	require.Error(t, err)
	_, err = New(nil, Options{})
	require.Error(t, err)
}
