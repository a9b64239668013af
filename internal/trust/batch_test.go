package trust

import (
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestTree_EveryLeafProvesItsInclusion(t *testing.T) {
	for n := 1; n <= 9; n++ {
		var leaves []Leaf
		for i := 0; i < n; i++ {
			leaves = append(leaves, Leaf{Subject: fmt.Sprintf("node_%d", i), Kind: "node.reboot"})
		}
		tr, err := NewTree(append(leaves, leaves[0])) // a duplicate is dropped
		require.NoError(t, err)
		require.Equal(t, uint64(n), tr.Size())
		for i := range tr.Leaves {
			p, err := tr.Proof(uint64(i))
			require.NoError(t, err)
			lh, err := tr.Leaves[i].LeafHash()
			require.NoError(t, err)
			require.Equal(t, tr.Root(), rootFrom(t, uint64(i), tr.Size(), lh, p), "n=%d i=%d", n, i)
		}
	}
}

// rootFrom is the root the library's verifier computes from a proof.
func rootFrom(t *testing.T, i, n uint64, lh []byte, p [][]byte) []byte {
	t.Helper()
	return verifyRoot(t, i, n, lh, p)
}

type quorum struct {
	alice, bob, carol ed25519.PrivateKey
	bundle            *Bundle
	tree              *Tree
	stmt              []byte
}

func newQuorum(t *testing.T, requester string, scope ...Leaf) quorum {
	t.Helper()
	q := quorum{alice: key(t), bob: key(t), carol: key(t)}
	q.bundle = &Bundle{Version: 1, ApprovalThreshold: 2, Approvers: []Approver{
		{Name: "alice", PublicKey: pub(q.alice)}, {Name: "bob", PublicKey: pub(q.bob)}, {Name: "carol", PublicKey: pub(q.carol)}}}
	tr, err := NewTree(scope)
	require.NoError(t, err)
	q.tree = tr
	q.stmt, err = BatchStatement{BatchID: "batch_1", TreeSize: tr.Size(), RootHash: hex.EncodeToString(tr.Root()), NotAfter: t0.Add(time.Hour), Requester: requester}.Encode()
	require.NoError(t, err)
	return q
}

func (q quorum) approval(keys ...ed25519.PrivateKey) []byte {
	s := Signed{Body: q.stmt}
	for _, k := range keys {
		s.Signatures = append(s.Signatures, SignApproval(k, q.stmt))
	}
	return s.Encode()
}

func (q quorum) check(t *testing.T, approval []byte, node, kind string, payload []byte) BatchCheck {
	t.Helper()
	sum := sha256.Sum256(payload)
	i, ok := q.tree.Index(node, kind, sum[:])
	if !ok {
		i = 0
	}
	p, err := q.tree.Proof(i)
	require.NoError(t, err)
	return BatchCheck{Approval: approval, LeafIndex: i, Proof: p, BatchID: "batch_1", NodeID: node, Kind: kind, PayloadSHA256: sum[:]}
}

// The node's refusals of issue 11, at the verifier: each is BATCH_UNAPPROVED
// on the node.
func TestVerifyBatch_TheQuorumAndTheLeafTheNodeComputes(t *testing.T) {
	payload := []byte(`{"gpus":["GPU-1"]}`)
	ps := sha256.Sum256(payload)
	q := newQuorum(t, "dave",
		Leaf{Subject: "node_a", Kind: "node.reboot"},
		Leaf{Subject: "node_b", Kind: "node.reboot"},
		Leaf{Subject: "node_c", Kind: "gpu.reset", PayloadSHA256: ps[:]})
	ok := func(c BatchCheck) { t.Helper(); _, err := VerifyBatch(q.bundle, c, t0); require.NoError(t, err) }
	refused := func(c BatchCheck, want error) {
		t.Helper()
		_, err := VerifyBatch(q.bundle, c, t0)
		require.ErrorIs(t, err, want)
	}
	two := q.approval(q.alice, q.bob)
	ok(q.check(t, two, "node_a", "node.reboot", nil))
	ok(q.check(t, two, "node_c", "gpu.reset", payload))

	t.Run("too few approvals", func(t *testing.T) {
		refused(q.check(t, q.approval(q.alice), "node_a", "node.reboot", nil), ErrTooFewApprovals)
	})
	t.Run("one approver counted twice", func(t *testing.T) {
		refused(q.check(t, q.approval(q.alice, q.alice), "node_a", "node.reboot", nil), ErrTooFewApprovals)
	})
	t.Run("forged approval", func(t *testing.T) {
		s, _ := DecodeSigned(two)
		s.Signatures[1].Sig = append([]byte(nil), s.Signatures[0].Sig...)
		refused(q.check(t, s.Encode(), "node_a", "node.reboot", nil), ErrTooFewApprovals)
	})
	t.Run("a key not in the bundle", func(t *testing.T) {
		refused(q.check(t, q.approval(q.alice, key(t)), "node_a", "node.reboot", nil), ErrTooFewApprovals)
	})
	t.Run("the requester's own approval", func(t *testing.T) {
		qa := newQuorum(t, "alice", Leaf{Subject: "node_a", Kind: "node.reboot"})
		_, err := VerifyBatch(qa.bundle, qa.check(t, qa.approval(qa.alice, qa.bob), "node_a", "node.reboot", nil), t0)
		require.ErrorIs(t, err, ErrTooFewApprovals)
		_, err = VerifyBatch(qa.bundle, qa.check(t, qa.approval(qa.alice, qa.bob, qa.carol), "node_a", "node.reboot", nil), t0)
		require.NoError(t, err, "bob and carol are two others")
	})
	t.Run("a valid proof for another leaf", func(t *testing.T) {
		c := q.check(t, two, "node_b", "node.reboot", nil)
		c.NodeID = "node_x" // the node computes its own leaf
		refused(c, ErrNotInBatch)
	})
	t.Run("another kind", func(t *testing.T) { refused(q.check(t, two, "node_a", "gpu.reset", nil), ErrNotInBatch) })
	t.Run("another batch", func(t *testing.T) {
		c := q.check(t, two, "node_a", "node.reboot", nil)
		c.BatchID = "batch_2"
		refused(c, ErrNotInBatch)
	})
	t.Run("a payload altered from the one the leaf binds", func(t *testing.T) {
		refused(q.check(t, two, "node_c", "gpu.reset", []byte(`{"gpus":["GPU-1","GPU-2"]}`)), ErrNotInBatch)
	})
	t.Run("past the deadline", func(t *testing.T) {
		_, err := VerifyBatch(q.bundle, q.check(t, two, "node_a", "node.reboot", nil), t0.Add(2*time.Hour))
		require.ErrorIs(t, err, ErrBatchExpired)
	})
	t.Run("no approver keys", func(t *testing.T) {
		_, err := VerifyBatch(&Bundle{Version: 1}, q.check(t, two, "node_a", "node.reboot", nil), t0)
		require.ErrorIs(t, err, ErrUnknownKey)
	})
}

func BenchmarkVerifyBatch(b *testing.B) {
	q := quorum{alice: key(b), bob: key(b), carol: key(b)}
	q.bundle = &Bundle{Version: 1, ApprovalThreshold: 2, Approvers: []Approver{{Name: "alice", PublicKey: pub(q.alice)}, {Name: "bob", PublicKey: pub(q.bob)}, {Name: "carol", PublicKey: pub(q.carol)}}}
	var leaves []Leaf
	for i := 0; i < 1000; i++ {
		leaves = append(leaves, Leaf{Subject: fmt.Sprintf("node_%04d", i), Kind: "node.reboot"})
	}
	tr, err := NewTree(leaves)
	require.NoError(b, err)
	q.tree = tr
	q.stmt, _ = BatchStatement{BatchID: "batch_1", TreeSize: tr.Size(), RootHash: hex.EncodeToString(tr.Root()), NotAfter: t0.Add(time.Hour), Requester: "dave"}.Encode()
	appr := q.approval(q.alice, q.bob)
	p, _ := tr.Proof(500)
	c := BatchCheck{Approval: appr, LeafIndex: 500, Proof: p, BatchID: "batch_1", NodeID: tr.Leaves[500].Subject, Kind: "node.reboot"}
	body := []byte("x")
	sig := SignEd25519(q.alice, PurposeBatchApproval, body)
	var batch, bare time.Duration
	for i := 0; i < b.N; i++ {
		s := time.Now()
		if _, err := VerifyBatch(q.bundle, c, t0); err != nil {
			b.Fatal(err)
		}
		batch += time.Since(s)
		s = time.Now()
		_ = VerifyEd25519(pub(q.alice), PurposeBatchApproval, body, sig)
		bare += time.Since(s)
	}
	b.ReportMetric(float64(batch.Nanoseconds())/float64(b.N), "verify-ns")
	b.ReportMetric(float64(bare.Nanoseconds())/float64(b.N), "bare-ed25519-ns")
	b.ReportMetric(float64(batch)/float64(bare), "ratio")
}

func verifyRoot(t *testing.T, i, n uint64, lh []byte, p [][]byte) []byte {
	t.Helper()
	r, err := proofRoot(i, n, lh, p)
	require.NoError(t, err)
	return r
}
