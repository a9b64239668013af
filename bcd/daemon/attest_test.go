package daemon

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/better-compute/commands/bcd/accept"
	"github.com/better-compute/commands/bcd/journal"
	"github.com/better-compute/commands/internal/trust"
	agentv1 "github.com/better-compute/commands/proto/bc/agent/v1"
)

// withEnvelope gives c the envelope it would arrive in: its exact bytes.
func withEnvelope(t *testing.T, c accept.Command) accept.Command {
	t.Helper()
	b, err := proto.Marshal(&agentv1.Command{Id: c.ID, NodeId: c.NodeID, Kind: c.Kind, Payload: c.Payload, NotAfter: timestamppb.New(c.NotAfter)})
	require.NoError(t, err)
	c.Envelope = &agentv1.CommandEnvelope{Command: b}
	return c
}

// verifyOutcome checks u's node signature the way a consumer does, from
// the fields sent and the command bytes it was sent.
func verifyOutcome(t *testing.T, key *ecdsa.PrivateKey, commandBytes []byte, u Update) error {
	t.Helper()
	st := trust.ResultStatement{CommandID: u.CommandID, CommandDigest: trust.CommandDigest(commandBytes), NodeID: nodeID, State: string(u.State)}
	if len(u.Result) > 0 {
		sum := sha256.Sum256(u.Result)
		st.ResultSHA256 = sum[:]
	}
	body, err := st.Bytes()
	require.NoError(t, err)
	return trust.VerifyWith(&key.PublicKey, trust.PurposeCommandUpdate, body, u.NodeSig)
}

// "For attested kinds the node signs its result with its node key", over
// the digest of the command bytes it accepted, which the journal keeps: a
// duplicate answered from the journal after a restart is signed for the
// same command, whatever the duplicate carries.
func TestAttested_OutcomeSignedOverTheJournaledCommandDigest(t *testing.T) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	withKey := func(c *Config) { c.NodeKey = key }
	dir := t.TempDir()
	n := start(t, dir, withKey)
	h := newHold(t, true)
	h.release(t)
	c := withEnvelope(t, cmd("cmd_attested", "bcdcore.attested", h))
	out := last(t, collect(t, mustSubmit(t, n, c)))
	require.Equal(t, journal.StateSucceeded, out.State)
	require.NotEmpty(t, out.NodeSig)
	require.NoError(t, verifyOutcome(t, key, c.Envelope.GetCommand(), out))
	other := withEnvelope(t, cmd("cmd_other", "bcdcore.attested", h))
	require.ErrorIs(t, verifyOutcome(t, key, other.Envelope.GetCommand(), out), trust.ErrBadSignature, "not valid for other command bytes")

	plain := last(t, collect(t, mustSubmit(t, n, withEnvelope(t, cmd("cmd_plain", "bcdcore.hold", h)))))
	require.Empty(t, plain.NodeSig, "only attested kinds are signed")

	n.stop()
	n = start(t, dir, withKey)
	dup := c
	dup.Envelope = nil
	again := last(t, collect(t, mustSubmit(t, n, dup)))
	require.True(t, again.Duplicate)
	require.NoError(t, verifyOutcome(t, key, c.Envelope.GetCommand(), again), "signed the same way after a restart")
	require.Equal(t, 2, h.runs(t), "cmd_attested and cmd_plain, once each")
}

func mustSubmit(t *testing.T, n *node, c accept.Command) <-chan Update {
	t.Helper()
	ch, err := n.d.Submit(context.Background(), c)
	require.NoError(t, err)
	return ch
}
