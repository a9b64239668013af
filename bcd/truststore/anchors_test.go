package truststore

import (
	"crypto/ed25519"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/better-compute/commands/bcd/accept"
	"github.com/better-compute/commands/internal/trust"
	agentv1 "github.com/better-compute/commands/proto/bc/agent/v1"
)

const anchoredNode = "node_anchored"

// unsignedBundle is wire with its signatures stripped: a bundle nobody
// signed, as a gateway could send it.
func unsignedBundle(t *testing.T, wire []byte) []byte {
	t.Helper()
	s, err := trust.DecodeSigned(wire)
	require.NoError(t, err)
	s.Signatures = nil
	return s.Encode()
}

// signedCommand is what a worker key w signs for the anchored node; with
// signed false, the same envelope without the signature.
func signedCommand(t *testing.T, w *trust.WorkerKey, id string, signed bool) accept.Command {
	t.Helper()
	notAfter := time.Now().Add(10 * time.Minute).UTC().Truncate(time.Second)
	c := &agentv1.Command{Id: id, NodeId: anchoredNode, Kind: "diag.nvml", Payload: []byte(`{}`),
		NotAfter: timestamppb.New(notAfter), CreatedAt: timestamppb.Now()}
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(c)
	require.NoError(t, err)
	cmd := accept.Command{ID: id, NodeID: anchoredNode, Kind: "diag.nvml", Payload: []byte(`{}`), NotAfter: notAfter,
		Envelope: &agentv1.CommandEnvelope{Command: b, WorkerCert: w.Cert}}
	if signed {
		cmd.Envelope.Signature = w.Sign(trust.PurposeCommand, b)
	}
	return cmd
}

// docs/trust.md §1: with trustAnchors, "from then on the node rejects
// every command without a valid signature". "From then on" is from the
// first session: a node that holds anchors but no bundle yet requires
// signatures that chain to an anchor, and no bundle a gateway offers or
// withholds lowers that. Before this, HasCommandSigningRoots was false
// until a signed bundle arrived (bcd logged commands_signed=false
// anchors=1) and unsigned commands ran.
func TestStore_AnchorsRequireSignaturesBeforeAnyBundle(t *testing.T) {
	anchor, attacker := root(t), root(t)
	s, err := Open(t.TempDir(), []ed25519.PublicKey{anchor.Public().(ed25519.PublicKey)}, nil)
	require.NoError(t, err)
	require.True(t, s.Anchored())
	require.Nil(t, s.Bundle(), "no bundle held")
	require.Zero(t, s.Version())
	require.True(t, s.HasCommandSigningRoots(), "anchors alone make commands require signatures")

	now := time.Now()
	worker, err := trust.NewWorkerKey(anchor, now.Add(-time.Hour), 24*time.Hour)
	require.NoError(t, err)
	attackerWorker, err := trust.NewWorkerKey(attacker, now.Add(-time.Hour), 24*time.Hour)
	require.NoError(t, err)
	v := &Verifier{Store: s, NodeID: anchoredNode, Clock: &trust.Clock{}}
	verifies := func(t *testing.T) {
		t.Helper()
		require.True(t, s.HasCommandSigningRoots())
		require.NoError(t, v.VerifyCommand(signedCommand(t, worker, "cmd_anchor_signed", true)), "a worker key an anchor certified")
		err := v.VerifyCommand(signedCommand(t, attackerWorker, "cmd_attacker_signed", true))
		require.ErrorIs(t, err, trust.ErrUnknownKey)
		err = v.VerifyCommand(signedCommand(t, worker, "cmd_unsigned", false))
		require.ErrorIs(t, err, trust.ErrBadSignature)
	}
	verifies(t)
	err = v.VerifyCommand(signedCommand(t, attackerWorker, "cmd_attacker_signed", true))
	require.ErrorContains(t, err, "not in the node's trust anchors (it holds no trust bundle yet)")

	// Offers that must change nothing: unsigned, the attacker's own, and
	// an anchor's bundle stripped of its signature.
	for name, wire := range map[string][]byte{
		"the attacker's bundle":              bundle(t, 7, []ed25519.PrivateKey{attacker}, attacker),
		"an unsigned bundle naming its root": unsignedBundle(t, bundle(t, 7, []ed25519.PrivateKey{attacker}, attacker)),
		"an anchor's bundle, unsigned":       unsignedBundle(t, bundle(t, 7, []ed25519.PrivateKey{anchor}, anchor)),
		"an unsigned bundle with no roots":   unsignedBundle(t, bundle(t, 7, []ed25519.PrivateKey{attacker})),
	} {
		changed, err := s.Offer(wire, now)
		require.Error(t, err, name)
		require.False(t, changed, name)
		require.Nil(t, s.Bundle(), name)
		verifies(t)
	}

	// The join answer comes through the gateway too: on an anchored node
	// a bundle signed only by its own roots is refused.
	err = s.AcceptJoin(bundle(t, 7, []ed25519.PrivateKey{attacker}, attacker), now)
	require.ErrorContains(t, err, "not signed by a trust anchor")
	require.Nil(t, s.Bundle())
	verifies(t)

	// A bundle an anchor signed that names no command-signing root does
	// not open the node either: the anchors stand in for its roots.
	changed, err := s.Offer(bundle(t, 3, []ed25519.PrivateKey{anchor}), now)
	require.NoError(t, err)
	require.True(t, changed)
	require.Equal(t, int64(3), s.Version())
	require.False(t, s.Bundle().HasRoots())
	verifies(t)

	// Its successor must be signed by an anchor still.
	_, err = s.Offer(bundle(t, 4, []ed25519.PrivateKey{attacker}, attacker), now)
	require.ErrorIs(t, err, trust.ErrUnknownKey)
	changed, err = s.Offer(bundle(t, 4, []ed25519.PrivateKey{anchor}, anchor), now)
	require.NoError(t, err)
	require.True(t, changed)
	verifies(t)
}

// A node without anchors is unchanged: commands go unsigned until it holds
// a bundle with roots.
func TestStore_WithoutAnchorsCommandsGoUnsignedUntilABundle(t *testing.T) {
	s, err := Open(t.TempDir(), nil, nil)
	require.NoError(t, err)
	require.False(t, s.Anchored())
	require.False(t, s.HasCommandSigningRoots())
	require.Nil(t, s.Verifying())
}
