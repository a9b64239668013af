package trust

import (
	"crypto/x509"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestIdentity_RoundTripsThroughCertificateURIs(t *testing.T) {
	for _, id := range []Identity{
		{NodeID: "node_1", Role: "node"},
		{NodeID: "node_2", Role: "discovery", AllowedKinds: []string{"inventory.refresh", "diag.nvml"}},
	} {
		uris, err := IdentityURIs(id)
		require.NoError(t, err)
		got, err := IdentityOf(&x509.Certificate{URIs: uris})
		require.NoError(t, err)
		require.Equal(t, id.NodeID, got.NodeID)
		require.Equal(t, id.Role, got.Role)
		require.ElementsMatch(t, id.AllowedKinds, got.AllowedKinds)
	}
}

func TestIdentity_NoNodeIsNotANodeCertificate(t *testing.T) {
	_, err := IdentityOf(&x509.Certificate{})
	require.ErrorIs(t, err, ErrNotNodeCert)
	_, err = IdentityURIs(Identity{})
	require.Error(t, err)
}

// "A node whose current certificate carries allowed kinds ... only accepts those."
func TestIdentity_RestrictedAllowsOnlyItsKinds(t *testing.T) {
	full := Identity{NodeID: "n"}
	require.True(t, full.Allows("node.reboot"))
	r := Identity{NodeID: "n", AllowedKinds: []string{"inventory.refresh"}}
	require.True(t, r.Allows("inventory.refresh"))
	require.False(t, r.Allows("node.reboot"))
}

func TestIdentity_DefaultRoleIsNode(t *testing.T) {
	uris, err := IdentityURIs(Identity{NodeID: "n"})
	require.NoError(t, err)
	got, err := IdentityOf(&x509.Certificate{URIs: uris})
	require.NoError(t, err)
	require.Equal(t, DefaultRole, got.Role)
}
