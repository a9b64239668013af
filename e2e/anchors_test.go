package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/bcd/conditions"
	"github.com/better-compute/commands/bcd/journal"
	"github.com/better-compute/commands/controlplane/server/servertest"
	"github.com/better-compute/commands/internal/testutil"
	"github.com/better-compute/commands/internal/trust"
	apiv1 "github.com/better-compute/commands/proto/bc/api/v1"
)

// settled waits for the command to reach a terminal state.
func (c *cluster) settled(id string) *apiv1.Command {
	c.t.Helper()
	var got *apiv1.Command
	testutil.WaitFor(c.t, 60*time.Second, "command "+id+" to settle", func() bool {
		got = c.get(id)
		switch got.GetState() {
		case "succeeded", "failed", "rejected", "cancelled", "expired":
			return true
		}
		return false
	})
	return got
}

// Issue 31: "A node with trust anchors in its configuration refuses every
// command and spec that is not signed by a key chaining to one of them,
// from its first session on, whatever bundle the gateway sends or
// withholds ... A test with a control plane that does not sign shows
// BAD_SIGNATURE and nothing run." Before the fix, a bcd given
// `trustAnchors: [root.pem.pub]` (docs/trust.md §1) and pointed at a
// control plane without pki.commandSigning ran unsigned diag.nvml and
// inventory.refresh (succeeded). Here both are rejected BAD_SIGNATURE, the
// journal shows neither started, and the same node without its anchor runs
// inventory.refresh: the refusal is the anchor's doing, not the setup's.
func TestE2E_AnchoredNodeRefusesAnUnsigningControlPlane(t *testing.T) {
	c := newFirstPartyCluster(t, nil)
	n := c.join()
	require.Contains(t, n.joinOut, "no trust bundle (commands go unsigned)", "the control plane does not sign")
	env := baseEnv(t)
	env["BCD_NVIDIA_SMI"] = "mock"
	n.configure(env)
	base, err := os.ReadFile(n.config)
	require.NoError(t, err)

	// The command-signing root's public key, as `better-compute pki
	// create-root` writes it: the operator placed it, the control plane
	// was never given the private key.
	_, root, err := trust.NewEd25519()
	require.NoError(t, err)
	pub, err := trust.MarshalPublicKeyPEM(root.Public())
	require.NoError(t, err)
	anchor := filepath.Join(t.TempDir(), "command-root.pem.pub")
	require.NoError(t, os.WriteFile(anchor, pub, 0o644))
	require.NoError(t, os.WriteFile(n.config, append(append([]byte{}, base...), []byte("trustAnchors: ["+anchor+"]\n")...), 0o600))
	n.start()

	var ids []string
	for _, k := range []struct {
		kind    string
		payload map[string]any
	}{{"inventory.refresh", map[string]any{}}, {"diag.nvml", map[string]any{"expectedCount": 8}}} {
		cmd := c.settled(c.run(k.kind, k.payload).GetId())
		require.Equal(t, "rejected", cmd.GetState(), "%s: %s %s", k.kind, cmd.GetReason(), cmd.GetMessage())
		require.Equal(t, "BAD_SIGNATURE", cmd.GetReason(), cmd.GetMessage())
		require.Contains(t, cmd.GetMessage(), "unsigned")
		require.False(t, cmd.GetSigned())
		ids = append(ids, cmd.GetId())
	}
	require.Contains(t, n.logs.String(), "commands_signed=true", "bcd's start-up line says commands must be signed")
	nodes := apiv1.NewNodesClient(c.conn)
	testutil.WaitFor(t, 30*time.Second, "the node to report that commands must be signed", func() bool {
		got, err := nodes.Get(c.ctx(), &apiv1.GetNodeRequest{TenantId: servertest.TenantA, NodeId: servertest.NodeA1})
		if err != nil {
			return false
		}
		for _, cd := range got.GetConditions() {
			if cd.GetType() == conditions.TypeTrustBundle && cd.GetReason() == conditions.ReasonNone {
				return cd.GetStatus() == "False" && cd.GetMessage() == "no trust bundle yet: commands and node specs must be signed by a worker key that a trust anchor (trustAnchors) certified"
			}
		}
		return false
	})

	// The journal: each refusal recorded, neither command ever started.
	n.stop()
	out, errs, code := n.bcd("journal", "--json")
	require.Equal(t, 0, code, errs)
	var j struct {
		Records []journal.Record `json:"records"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &j), out)
	for _, id := range ids {
		found := false
		for _, r := range j.Records {
			if r.ID != id {
				continue
			}
			found = true
			require.Equal(t, journal.StateRejected, r.State, id)
			require.Equal(t, "BAD_SIGNATURE", r.RejectCode, id)
			require.Zero(t, r.Attempts, "%s never started", id)
			require.True(t, r.StartedAt.IsZero(), "%s never started", id)
		}
		require.True(t, found, "%s is journaled", id)
	}

	// The same node without its anchor takes the unsigned command: what
	// refused it above was the anchor.
	require.NoError(t, os.WriteFile(n.config, base, 0o600))
	n.start()
	inv := c.settled(c.run("inventory.refresh", map[string]any{}).GetId())
	require.Equal(t, "succeeded", inv.GetState(), "%s %s", inv.GetReason(), inv.GetMessage())
}
