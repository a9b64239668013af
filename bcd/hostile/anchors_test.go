package hostile

import (
	"crypto/ed25519"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/better-compute/commands/bcd/journal"
	"github.com/better-compute/commands/internal/trust"
	agentv1 "github.com/better-compute/commands/proto/bc/agent/v1"
)

const nodeAnchored = "node_hostile_anchored"

// anchor gives the node root's public key as its only trust anchor, as
// docs/trust.md §1 says: `trustAnchors: [/etc/bcd/command-root.pem.pub]`.
func (n *node) anchor(root ed25519.PrivateKey) {
	n.t.Helper()
	pub, err := trust.MarshalPublicKeyPEM(root.Public())
	require.NoError(n.t, err)
	path := filepath.Join(filepath.Dir(n.config), "command-root.pem.pub")
	require.NoError(n.t, os.WriteFile(path, pub, 0o644))
	require.NoError(n.t, os.WriteFile(n.config, []byte("logLevel: debug\ntrustAnchors: ["+path+"]\n"), 0o600))
}

// unsigned strips a signed document's signatures: a bundle nobody signed.
func unsigned(t *testing.T, wire []byte) []byte {
	t.Helper()
	s, err := trust.DecodeSigned(wire)
	require.NoError(t, err)
	s.Signatures = nil
	return s.Encode()
}

// Issue 31: "A node with trust anchors in its configuration refuses every
// command and spec that is not signed by a key chaining to one of them,
// from its first session on, whatever bundle the gateway sends or
// withholds". The node joined a control plane without signing (no bundle
// in the join answer) and holds only the command-signing root's public key
// as its anchor. Before the fix it ran unsigned commands of any kind until
// a signed bundle arrived (its log said `commands_signed=false ...
// anchors=1`). This test fails if the plugin ever records a run of a
// command that is not properly signed.
func TestAnchoredNodeRefusesUnsignedFromItsFirstSession(t *testing.T) {
	t.Parallel()
	s := &suite{t: t, a: newAuthority(t), ca: newNodeCA(t), refused: map[string]agentv1.RejectCode{}}
	s.gw = newGateway(t, s.ca.gatewayTLS(t))
	s.n = newNode(t, trust.Identity{NodeID: nodeAnchored}, s.ca, s.gw.addr, nil)
	s.n.anchor(s.a.current)
	command := func(id string) *agentv1.Command {
		c := s.command(id, "bcdcore.hold")
		c.NodeId = nodeAnchored
		return c
	}
	unsignedCommand := func(id string) *agentv1.CommandEnvelope {
		b, err := proto.Marshal(command(id))
		require.NoError(t, err)
		return &agentv1.CommandEnvelope{Command: b}
	}
	// A gateway that withholds the bundle, as one without pki.commandSigning
	// does (and a compromised one may).
	withheld := func() *agentv1.Welcome { return &agentv1.Welcome{ServerTime: ts(time.Now()), SessionEpoch: 1} }
	s.gw.setWelcome(withheld)
	s.n.start()
	s.cur = s.gw.session(t, 1)
	require.Zero(t, s.cur.hello.GetTrustVersion(), "no bundle held")

	t.Run("an unsigned command in the first session", func(t *testing.T) {
		s.refuse(t, unsignedCommand("cmd_anchored_unsigned"), "cmd_anchored_unsigned", agentv1.RejectCode_REJECT_CODE_BAD_SIGNATURE, "unsigned")
	})
	t.Run("the log and the TrustBundle condition say commands must be signed", func(t *testing.T) {
		require.Contains(t, s.n.log.String(), "commands_signed=true", "bcd says at start that commands must be signed")
		cd := s.cur.condition(t, "TrustBundle", func(c *agentv1.NodeCondition) bool { return c.GetReason() == "none" })
		require.False(t, cd.GetStatus())
		require.Contains(t, cd.GetMessage(), "must be signed by a worker key that a trust anchor (trustAnchors) certified")
	})
	t.Run("a command signed by a root that is not an anchor", func(t *testing.T) {
		s.refuse(t, sign(t, s.a.attackerWorker, command("cmd_anchored_attacker")), "cmd_anchored_attacker",
			agentv1.RejectCode_REJECT_CODE_BAD_SIGNATURE, "not in the node's trust anchors")
	})
	t.Run("an unsigned spec", func(t *testing.T) {
		s.cur.spec(&agentv1.Spec{Generation: 4, Spec: []byte(`{"holds":[{"gpu":"GPU-8","allocation":"alloc_evil","state":"live"}]}`)})
		cd := s.cur.condition(t, "NodeSpec", func(c *agentv1.NodeCondition) bool { return strings.Contains(c.GetMessage(), "generation 4") })
		require.False(t, cd.GetStatus())
		require.Equal(t, "unverified", cd.GetReason(), cd.GetMessage())
	})
	t.Run("a command a worker key of the anchor signed runs", func(t *testing.T) {
		s.run(t, sign(t, s.a.worker, command("cmd_anchored_good")), "cmd_anchored_good")
	})
	t.Run("a spec a worker key of the anchor signed is applied", func(t *testing.T) {
		s.cur.spec(signedSpec(t, s.a.worker, nodeAnchored, 2, `{}`))
		cd := s.cur.condition(t, "NodeSpec", func(c *agentv1.NodeCondition) bool { return c.GetStatus() })
		require.Equal(t, "node spec generation 2 applied", cd.GetMessage())
	})
	t.Run("a Welcome whose server time makes an expired command look fresh", func(t *testing.T) {
		c := s.reconnect(t, func() *agentv1.Welcome {
			w := withheld()
			w.ServerTime = ts(time.Now().Add(-48 * time.Hour))
			return w
		})
		cd := c.condition(t, "ClockSkew", func(c *agentv1.NodeCondition) bool { return c.GetStatus() })
		require.Equal(t, "refused", cd.GetReason(), "the anchored node does not take the gateway's time beyond maxClockSkew")
		cmd := command("cmd_anchored_revived")
		cmd.CreatedAt, cmd.NotAfter = ts(time.Now().Add(-2*time.Hour)), ts(time.Now().Add(-time.Hour))
		s.refuse(t, sign(t, s.a.worker, cmd), "cmd_anchored_revived", agentv1.RejectCode_REJECT_CODE_EXPIRED, "not_after")
	})
	// Bundles that must not lower the requirement: each is refused, and an
	// unsigned command after it is refused too.
	for _, offer := range []struct {
		name   string
		wire   func() []byte
		reason string
	}{
		{"the attacker's own bundle", func() []byte { return s.a.attackerBundle }, "unverified"},
		{"the anchor's bundle with its signatures stripped", func() []byte { return unsigned(t, s.a.v2) }, "malformed"},
		{"an unsigned bundle that names no root", func() []byte {
			return unsigned(t, s.a.bundle(50, nil, s.a.attacker))
		}, "malformed"},
		{"a bundle that names no root, signed by a root that is not an anchor", func() []byte {
			return s.a.bundle(50, nil, s.a.attacker)
		}, "unverified"},
	} {
		t.Run("a Welcome carrying "+offer.name, func(t *testing.T) {
			c := s.reconnect(t, func() *agentv1.Welcome {
				w := withheld()
				w.TrustBundle = &agentv1.TrustBundle{Version: 50, Signed: offer.wire()}
				return w
			})
			require.Zero(t, c.hello.GetTrustVersion())
			cd := c.condition(t, "TrustBundle", func(c *agentv1.NodeCondition) bool { return c.GetReason() != "none" })
			require.False(t, cd.GetStatus())
			require.Equal(t, offer.reason, cd.GetReason(), cd.GetMessage())
			id := "cmd_anchored_after_" + strings.ReplaceAll(offer.name, " ", "_")
			s.refuse(t, unsignedCommand(id), id, agentv1.RejectCode_REJECT_CODE_BAD_SIGNATURE, "unsigned")
		})
	}
	t.Run("after a restart, still no bundle: the first session refuses unsigned commands", func(t *testing.T) {
		s.n.stop()
		s.gw.setWelcome(withheld)
		k := s.gw.sessions()
		s.n.start()
		s.cur = s.gw.session(t, k+1)
		s.refuse(t, unsignedCommand("cmd_anchored_after_restart"), "cmd_anchored_after_restart", agentv1.RejectCode_REJECT_CODE_BAD_SIGNATURE, "unsigned")
	})
	t.Run("the anchor's bundle is taken, and commands verify against it", func(t *testing.T) {
		c := s.reconnect(t, func() *agentv1.Welcome {
			w := withheld()
			w.TrustBundle = &agentv1.TrustBundle{Version: 2, Signed: s.a.v2}
			return w
		})
		c.condition(t, "TrustBundle", func(c *agentv1.NodeCondition) bool {
			return c.GetStatus() && c.GetMessage() == "trust bundle version 2"
		})
		s.run(t, sign(t, s.a.worker, command("cmd_anchored_bundle_good")), "cmd_anchored_bundle_good")
		s.refuse(t, unsignedCommand("cmd_anchored_bundle_unsigned"), "cmd_anchored_bundle_unsigned", agentv1.RejectCode_REJECT_CODE_BAD_SIGNATURE, "unsigned")
	})
	t.Run("every refusal is journaled and nothing refused ran", func(t *testing.T) {
		s.n.stop()
		j := s.n.journal()
		for id, code := range s.refused {
			rec, found, err := j.Get(id)
			require.NoError(t, err)
			require.True(t, found, "%s is journaled", id)
			require.Equal(t, journal.StateRejected, rec.State, id)
			require.Equal(t, strings.TrimPrefix(code.String(), "REJECT_CODE_"), rec.RejectCode, id)
			require.Zero(t, rec.Attempts, "%s never started", id)
		}
		ran := s.n.ran()
		slices.Sort(ran)
		want := append([]string(nil), s.good...)
		slices.Sort(want)
		require.Equal(t, want, ran, "the plugin ran exactly the properly signed commands, once each")
	})
}
