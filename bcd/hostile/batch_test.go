package hostile

import (
	"crypto/ed25519"
	"encoding/hex"
	"encoding/json"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/bcd/journal"
	"github.com/better-compute/commands/internal/trust"
	agentv1 "github.com/better-compute/commands/proto/bc/agent/v1"
)

// destroy is the recording plugin's destructive kind.
const destroy = "bcdcore.destroy"

// approvers are the quorum's keys, and one the node's bundle never held.
type approvers struct {
	alice, bob, carol, mallory ed25519.PrivateKey
}

// quorumBundle is a bundle of version holding the current root and the
// quorum (2 of alice, bob and carol) with a break-glass allowance of
// perHour, signed by the current root.
func (a *authority) quorumBundle(version int64, q approvers, perHour int) []byte {
	b := trust.Bundle{Version: version, IssuedAt: time.Now().Add(-time.Minute).UTC().Truncate(time.Second),
		Roots: []trust.Root{{PublicKey: a.current.Public().(ed25519.PublicKey)}},
		Approvers: []trust.Approver{{Name: "alice", PublicKey: q.alice.Public().(ed25519.PublicKey)},
			{Name: "bob", PublicKey: q.bob.Public().(ed25519.PublicKey)}, {Name: "carol", PublicKey: q.carol.Public().(ed25519.PublicKey)}},
		ApprovalThreshold: 2, UnbatchedDestructivePerHour: perHour}
	w, err := trust.SignBundle(b, a.current)
	require.NoError(a.t, err)
	return w
}

// batch is a destructive batch as the control plane builds it: the scope's
// tree and the statement the approvers sign.
type batch struct {
	id   string
	tree *trust.Tree
	stmt []byte
}

func newBatch(t *testing.T, id, requester string, scope ...trust.Leaf) *batch {
	t.Helper()
	tr, err := trust.NewTree(scope)
	require.NoError(t, err)
	st, err := trust.BatchStatement{BatchID: id, TreeSize: tr.Size(), RootHash: hex.EncodeToString(tr.Root()),
		NotAfter: time.Now().Add(time.Hour), Requester: requester}.Encode()
	require.NoError(t, err)
	return &batch{id: id, tree: tr, stmt: st}
}

// approval is the wire form of the statement with sigs.
func (b *batch) approval(sigs ...trust.Signature) []byte {
	return trust.Signed{Body: b.stmt, Signatures: sigs}.Encode()
}

// by is k's approval signature.
func (b *batch) by(k ed25519.PrivateKey) trust.Signature { return trust.SignApproval(k, b.stmt) }

// proof is the index and audit path of the leaf naming subject and kind
// (bound to payload, if such a leaf exists).
func (b *batch) proof(t *testing.T, subject, kind string, payload []byte) (int64, [][]byte) {
	t.Helper()
	sum := trustDigest(payload)
	i, ok := b.tree.Index(subject, kind, sum[:])
	require.True(t, ok, "%s/%s is in %s", subject, kind, b.id)
	p, err := b.tree.Proof(i)
	require.NoError(t, err)
	return int64(i), p
}

// batched is a destructive command in batch (signed: the batch id is in the
// command bytes), with approval, index and proof in the envelope, outside
// the signed bytes, as the gateway relays them.
func (s *suite) batched(t *testing.T, id, batchID string, payload []byte, approval []byte, index int64, proof [][]byte) *agentv1.CommandEnvelope {
	t.Helper()
	c := s.command(id, destroy)
	c.BatchId, c.Payload = batchID, payload
	env := sign(t, s.a.worker, c)
	env.BatchApproval, env.LeafIndex, env.InclusionProof = approval, index, proof
	return env
}

// "BATCH_UNAPPROVED or UNBATCHED_LIMIT: with approver keys, a destructive
// command outside an approved batch", and "the node checks both itself"
// (the approval and its inclusion proof): every way a gateway, or the
// control plane behind it, can try to run a destructive command the
// quorum did not approve is refused by the node with the spec's code,
// journaled, and the recording plugin shows nothing ran; a properly
// approved command runs, once, and its leaf is consumed.
func TestHostileGateway_DestructiveBatches(t *testing.T) {
	t.Parallel()
	s := &suite{t: t, a: newAuthority(t), ca: newNodeCA(t), refused: map[string]agentv1.RejectCode{}}
	q := approvers{alice: edKey(t), bob: edKey(t), carol: edKey(t), mallory: edKey(t)}
	quorumBundle := s.a.quorumBundle(2, q, 1)
	s.gw = newGateway(t, s.ca.gatewayTLS(t))
	s.n = newNode(t, trust.Identity{NodeID: nodeA}, s.ca, s.gw.addr, s.a.v1)
	// The join answer's bundle (version 1) holds no approver keys.
	s.gw.setWelcome(func() *agentv1.Welcome {
		return &agentv1.Welcome{ServerTime: ts(time.Now()), SessionEpoch: 1, TrustBundle: &agentv1.TrustBundle{Version: 1, Signed: s.a.v1}}
	})
	s.n.start()
	s.cur = s.gw.session(t, 1)
	require.Equal(t, int64(1), s.cur.hello.GetTrustVersion())

	payload := s.n.payload()
	altered := func() []byte {
		var p map[string]string
		require.NoError(t, json.Unmarshal(payload, &p))
		p["startedFile"] = filepath.Join(t.TempDir(), "started")
		b, err := json.Marshal(p)
		require.NoError(t, err)
		return b
	}()
	sum := trustDigest(payload)
	// batch_1 is the one approved batch of the node's own: its leaf binds
	// the payload; the other leaves are other nodes'.
	b1 := newBatch(t, "batch_1", "dave",
		trust.Leaf{Subject: nodeA, Kind: destroy, PayloadSHA256: sum[:]},
		trust.Leaf{Subject: "node_hostile_b", Kind: destroy},
		trust.Leaf{Subject: "node_hostile_c", Kind: destroy})
	two := b1.approval(b1.by(q.alice), b1.by(q.bob))
	i1, p1 := b1.proof(t, nodeA, destroy, payload)

	t.Run("without approver keys a batch is recorded for audit only", func(t *testing.T) {
		// "Without approver keys a batch is recorded for audit only and its
		// commands go out at once": check 5 does not apply.
		s.run(t, s.batched(t, "cmd_audit_only", "batch_audit", payload, []byte("not an approval"), 0, nil), "cmd_audit_only")
		s.run(t, sign(t, s.a.worker, s.command("cmd_unbatched_no_quorum", destroy)), "cmd_unbatched_no_quorum")
	})
	t.Run("a Welcome brings the quorum", func(t *testing.T) {
		c := s.reconnect(t, func() *agentv1.Welcome {
			return &agentv1.Welcome{ServerTime: ts(time.Now()), SessionEpoch: 1, TrustBundle: &agentv1.TrustBundle{Version: 2, Signed: quorumBundle}}
		})
		c.condition(t, "TrustBundle", func(c *agentv1.NodeCondition) bool {
			return c.GetStatus() && c.GetMessage() == "trust bundle version 2"
		})
	})

	unapproved := agentv1.RejectCode_REJECT_CODE_BATCH_UNAPPROVED
	t.Run("a forged approval", func(t *testing.T) {
		// Bob's key id over alice's signature bytes: it verifies under
		// neither key for bob.
		forged := b1.by(q.alice)
		forged.KeyID = b1.by(q.bob).KeyID
		s.refuse(t, s.batched(t, "cmd_forged", "batch_1", payload, b1.approval(b1.by(q.alice), forged), i1, p1), "cmd_forged",
			unapproved, "too few distinct approvers signed the batch: 1 of 2 needed")
	})
	t.Run("too few approvals", func(t *testing.T) {
		s.refuse(t, s.batched(t, "cmd_too_few", "batch_1", payload, b1.approval(b1.by(q.alice)), i1, p1), "cmd_too_few",
			unapproved, "too few distinct approvers signed the batch: 1 of 2 needed")
	})
	t.Run("one approver counted twice", func(t *testing.T) {
		s.refuse(t, s.batched(t, "cmd_twice", "batch_1", payload, b1.approval(b1.by(q.alice), b1.by(q.alice)), i1, p1), "cmd_twice",
			unapproved, "too few distinct approvers signed the batch: 1 of 2 needed")
	})
	t.Run("the requester's own approval", func(t *testing.T) {
		// "people approve with their approver keys", never their own batch.
		own := newBatch(t, "batch_alice", "alice", trust.Leaf{Subject: nodeA, Kind: destroy, PayloadSHA256: sum[:]})
		i, p := own.proof(t, nodeA, destroy, payload)
		s.refuse(t, s.batched(t, "cmd_self_approved", "batch_alice", payload, own.approval(own.by(q.alice), own.by(q.bob)), i, p), "cmd_self_approved",
			unapproved, "too few distinct approvers signed the batch: 1 of 2 needed")
	})
	t.Run("an approval by a key not in the node's bundle", func(t *testing.T) {
		s.refuse(t, s.batched(t, "cmd_mallory", "batch_1", payload, b1.approval(b1.by(q.alice), b1.by(q.mallory)), i1, p1), "cmd_mallory",
			unapproved, "too few distinct approvers signed the batch: 1 of 2 needed")
	})
	t.Run("a valid proof for another leaf", func(t *testing.T) {
		// node_hostile_b's leaf is in batch_1 and its proof is valid; the
		// node computes its own leaf, which is not at that index.
		i, p := b1.proof(t, "node_hostile_b", destroy, nil)
		s.refuse(t, s.batched(t, "cmd_other_leaf", "batch_1", payload, two, i, p), "cmd_other_leaf",
			unapproved, "not a leaf of the approved batch")
	})
	b2 := newBatch(t, "batch_2", "dave", trust.Leaf{Subject: nodeA, Kind: destroy}, trust.Leaf{Subject: "node_hostile_x", Kind: destroy})
	i2, p2 := b2.proof(t, nodeA, destroy, payload)
	approved2 := b2.approval(b2.by(q.bob), b2.by(q.carol))
	t.Run("a valid proof of another batch", func(t *testing.T) {
		// The node's leaf is in batch_2 (unbound, so any payload) and the
		// proof is valid there, not under batch_1's approved root.
		s.refuse(t, s.batched(t, "cmd_other_tree", "batch_1", payload, two, i2, p2), "cmd_other_tree",
			unapproved, "not a leaf of the approved batch")
	})
	t.Run("another batch's approval and proof, for a command that names batch_1", func(t *testing.T) {
		// The batch id is in the signed command; the approval is not.
		s.refuse(t, s.batched(t, "cmd_other_batch", "batch_1", payload, approved2, i2, p2), "cmd_other_batch",
			unapproved, "the approval is for batch batch_2, the command names batch_1")
	})
	t.Run("a payload altered from the one the leaf binds", func(t *testing.T) {
		// "payloadSha256 (hex) would bind one exact payload": the worker
		// signed another payload than the one the quorum approved.
		s.refuse(t, s.batched(t, "cmd_altered", "batch_1", altered, two, i1, p1), "cmd_altered",
			unapproved, "not a leaf of the approved batch")
	})
	t.Run("a properly approved batched destructive command runs once", func(t *testing.T) {
		s.run(t, s.batched(t, "cmd_batch_good", "batch_1", payload, two, i1, p1), "cmd_batch_good")
	})
	t.Run("a replayed leaf", func(t *testing.T) {
		// "a (batch, leaf) is consumed once": another command id, the same
		// batch, leaf, approval and proof (approved by others this time).
		s.refuse(t, s.batched(t, "cmd_leaf_replay", "batch_1", payload, b1.approval(b1.by(q.bob), b1.by(q.carol)), i1, p1), "cmd_leaf_replay",
			unapproved, "consumed by another command: leaf "+strconv.FormatInt(i1, 10)+" of batch batch_1 ran cmd_batch_good")
	})
	t.Run("an unbatched destructive command within the allowance runs", func(t *testing.T) {
		s.run(t, sign(t, s.a.worker, s.command("cmd_break_glass", destroy)), "cmd_break_glass")
	})
	t.Run("an unbatched destructive command over the allowance", func(t *testing.T) {
		s.refuse(t, sign(t, s.a.worker, s.command("cmd_over_allowance", destroy)), "cmd_over_allowance",
			agentv1.RejectCode_REJECT_CODE_UNBATCHED_LIMIT, "no break-glass allowance is left")
	})
	t.Run("after a restart the leaf and the allowance stay consumed", func(t *testing.T) {
		s.n.stop()
		k := s.gw.sessions()
		s.n.start()
		s.cur = s.gw.session(t, k+1)
		require.Equal(t, int64(2), s.cur.hello.GetTrustVersion())
		s.refuse(t, s.batched(t, "cmd_leaf_replay_restarted", "batch_1", payload, two, i1, p1), "cmd_leaf_replay_restarted",
			unapproved, "ran cmd_batch_good")
		s.refuse(t, sign(t, s.a.worker, s.command("cmd_over_allowance_restarted", destroy)), "cmd_over_allowance_restarted",
			agentv1.RejectCode_REJECT_CODE_UNBATCHED_LIMIT, "no break-glass allowance is left")
		// The command that ran is answered from the journal, not run again.
		s.cur.command(s.batched(t, "cmd_batch_good", "batch_1", payload, two, i1, p1))
		require.Equal(t, agentv1.CommandState_COMMAND_STATE_SUCCEEDED, s.cur.outcome(t, "cmd_batch_good", 1).GetState())
		require.Equal(t, 1, count(s.n.ran(), "cmd_batch_good"))
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
		}
		ran := s.n.ran()
		slices.Sort(ran)
		want := append([]string(nil), s.good...)
		slices.Sort(want)
		require.Equal(t, want, ran, "the plugin ran exactly the approved commands and the one the allowance admitted, once each")
		require.Len(t, s.refused, 13)
	})
}

// trustDigest is the leaf's payload digest as the node computes it.
func trustDigest(payload []byte) [32]byte {
	var out [32]byte
	copy(out[:], trust.PayloadDigest(payload))
	return out
}
