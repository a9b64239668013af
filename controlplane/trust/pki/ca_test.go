package pki

import (
	"github.com/better-compute/commands/internal/trust"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestCA_IssueNode_RecordsRestrictedIdentity(t *testing.T) {
	ca, err := NewCA("test")
	require.NoError(t, err)
	_, csr, err := trust.NewKeyAndCSR("host-1")
	require.NoError(t, err)
	certPEM, err := ca.IssueNode(csr, trust.Identity{NodeID: "node_1", Role: "discovery", AllowedKinds: []string{"inventory.refresh", "diag.nvml"}})
	require.NoError(t, err)
	cert, err := trust.ParseCertPEM(certPEM)
	require.NoError(t, err)
	id, err := trust.IdentityOf(cert)
	require.NoError(t, err)
	require.Equal(t, "node_1", id.NodeID)
	require.Equal(t, "discovery", id.Role)
	require.True(t, id.Restricted())
	require.True(t, id.Allows("diag.nvml"))
	require.False(t, id.Allows("node.reboot"), "a restricted identity only accepts its allowed kinds")

	full, err := ca.IssueNode(csr, trust.Identity{NodeID: "node_2"})
	require.NoError(t, err)
	c2, _ := trust.ParseCertPEM(full)
	id2, err := trust.IdentityOf(c2)
	require.NoError(t, err)
	require.Equal(t, "node", id2.Role)
	require.True(t, id2.Allows("node.reboot"))
}

func TestCA_LoadOrCreate_RoundTrips(t *testing.T) {
	dir := t.TempDir()
	a, err := LoadOrCreateCA(dir)
	require.NoError(t, err)
	b, err := LoadOrCreateCA(dir)
	require.NoError(t, err)
	require.Equal(t, a.Cert.Raw, b.Cert.Raw)
}

func TestCA_IssueNode_RefusesBadCSR(t *testing.T) {
	ca, err := NewCA("test")
	require.NoError(t, err)
	_, err = ca.IssueNode([]byte("garbage"), trust.Identity{NodeID: "node_1"})
	require.ErrorContains(t, err, "csr")
}
