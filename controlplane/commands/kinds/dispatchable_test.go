package kinds_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/controlplane/commands/kinds"
)

// Issue 33's upgrades in either order: a node runs a digest the registry
// knows (registered), or another version within a registered manifest's
// compatibleVersions (compatible: dispatched under the newest such
// manifest), or neither (mismatch); a kind with no manifest is
// unregistered.
func TestDispatchableAcceptsAVersionWithinARegisteredRange(t *testing.T) {
	v1 := probe
	v1.Version, v1.CompatibleVersions = "1.0.0", "^1"
	v12 := probe
	v12.Version, v12.CompatibleVersions = "1.2.0", ">=1.0.0 <1.5.0"
	exact := probe
	exact.Version = "3.0.0" // declares no range
	r, err := kinds.NewRegistry(v1, v12, exact)
	require.NoError(t, err)

	m, status, ok := r.Dispatchable(probe.Kind, "1.0.0", v1.Digest())
	require.True(t, ok)
	require.Equal(t, kinds.StatusRegistered, status)
	require.Equal(t, "1.0.0", m.Version)

	// A 1.1.0 whose manifest the registry never saw: both ranges hold it,
	// the newest manifest's wins.
	m, status, ok = r.Dispatchable(probe.Kind, "1.1.0", "feed")
	require.True(t, ok)
	require.Equal(t, kinds.StatusCompatible, status)
	require.Equal(t, "1.2.0", m.Version)
	// 1.7.0: only ^1 holds it.
	m, status, ok = r.Dispatchable(probe.Kind, "1.7.0", "feed")
	require.True(t, ok)
	require.Equal(t, kinds.StatusCompatible, status)
	require.Equal(t, "1.0.0", m.Version)

	// Outside every range, no version (an older bcd) or a bad one: held.
	for _, v := range []string{"2.0.0", "3.0.1", "", "not-a-version"} {
		m, status, ok = r.Dispatchable(probe.Kind, v, "feed")
		require.False(t, ok, v)
		require.Equal(t, kinds.StatusMismatch, status, v)
		require.Equal(t, "3.0.0", m.Version, "the newest, to name in the message")
	}

	_, status, ok = r.Dispatchable("vendor.none", "1.0.0", "feed")
	require.False(t, ok)
	require.Equal(t, kinds.StatusUnregistered, status)

	// A range that does not parse is refused when the manifest registers.
	bad := probe
	bad.Version, bad.CompatibleVersions = "4.0.0", "sometimes"
	_, err = kinds.NewRegistry(bad)
	require.ErrorContains(t, err, `compatibleVersions "sometimes"`)
}
