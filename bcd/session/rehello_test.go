package session_test

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/bcd/session"
	"github.com/better-compute/commands/sdk/kind"
)

// "The reloaded kinds reach the control plane": after bcd reloaded its
// plugins, Rehello ends the session and the next Hello carries the new
// kinds and digests.
func TestSession_RehelloSendsTheReloadedKindsInANewHello(t *testing.T) {
	var lock sync.Mutex
	kinds := []kind.Manifest{{Kind: "acme.flash", Lane: kind.LaneControl, Timeout: kind.Duration(time.Minute), Roles: []string{"node"}, Version: "1.0.0"}}
	r := newRig(t, 0, func(c *session.Config) {
		c.Kinds = func() []kind.Manifest {
			lock.Lock()
			defer lock.Unlock()
			return append([]kind.Manifest(nil), kinds...)
		}
	})
	s1 := r.session()
	require.Len(t, s1.hello.GetKinds(), 1)
	v1 := s1.hello.GetKinds()[0].GetDigest()

	lock.Lock()
	kinds[0].Version = "2.0.0"
	want := kinds[0].Digest()
	lock.Unlock()
	r.client.Rehello()
	s2 := r.session()
	require.Len(t, s2.hello.GetKinds(), 1)
	require.Equal(t, "acme.flash", s2.hello.GetKinds()[0].GetKind())
	require.Equal(t, want, s2.hello.GetKinds()[0].GetDigest())
	require.NotEqual(t, v1, want)
}
