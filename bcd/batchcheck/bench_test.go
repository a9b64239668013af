package batchcheck

import (
	"crypto/sha256"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/bcd/accept"
	"github.com/better-compute/commands/internal/trust"
	agentv1 "github.com/better-compute/commands/proto/bc/agent/v1"
)

// BenchmarkVerifyApproval is check 5 as the node runs it for a batched
// command (Checker.VerifyApproval: the approval decoded, two of three
// approvers' signatures verified, the node's own leaf hashed from its id,
// the kind and the payload's SHA-256, its inclusion proof in a 1024-leaf
// tree checked, and the leaf looked up in a ledger holding 512 consumed
// leaves), beside a bare Ed25519 verify in the same loop, alternately,
// their medians and ratio reported. The
// floor of a 2-of-n quorum is two verifies, so the ratio is about 2 plus
// the rest. It also reports Consume, the synced write of the ledger before
// the command runs (fsync-bound), over 100 leaves.
func BenchmarkVerifyApproval(b *testing.B) {
	var scope []trust.Leaf
	for i := 0; i < 1024; i++ {
		scope = append(scope, trust.Leaf{Subject: node, Kind: fmt.Sprintf("bench.kind_%04d", i)})
	}
	f := newFixture(b, 0, scope...)
	c := f.open()
	c.led = c.led.advance(f.now)
	for i := 0; i < 512; i++ {
		k := leafKey{fmt.Sprintf("batch_old_%d", i), uint64(i)}
		c.led.leaves[k] = consumedLeaf{BatchID: k.batch, LeafIndex: k.index, CommandID: fmt.Sprintf("cmd_old_%d", i), NotAfter: f.notAfter}
	}
	command := func(id string, leaf int) accept.Command {
		p, err := f.tree.Proof(uint64(leaf))
		require.NoError(b, err)
		return accept.Command{ID: id, NodeID: node, Kind: f.tree.Leaves[leaf].Kind, Payload: payload, BatchID: "batch_1",
			Envelope: &agentv1.CommandEnvelope{BatchApproval: f.approval, LeafIndex: int64(leaf), InclusionProof: p}}
	}
	cmd := command("cmd_bench", 500)
	require.NoError(b, c.VerifyApproval(cmd))
	body := sha256.Sum256([]byte("a batch statement"))
	sig := trust.SignEd25519(f.alice, trust.PurposeBatchApproval, body[:])
	alice := pub(f.alice)

	verify, bare := make([]time.Duration, b.N), make([]time.Duration, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		if err := c.VerifyApproval(cmd); err != nil {
			b.Fatal(err)
		}
		verify[i] = time.Since(t0)
		t0 = time.Now()
		if err := trust.VerifyEd25519(alice, trust.PurposeBatchApproval, body[:], sig); err != nil {
			b.Fatal(err)
		}
		bare[i] = time.Since(t0)
	}
	b.StopTimer()

	consume := make([]time.Duration, 100)
	for i := range consume {
		cm := command(fmt.Sprintf("cmd_consume_%d", i), i)
		t0 := time.Now()
		if code, err := c.Consume(cm, false, f.now); err != nil || code != "" {
			b.Fatalf("%s %v", code, err)
		}
		consume[i] = time.Since(t0)
	}
	v50, b50, c50 := p50(verify), p50(bare), p50(consume)
	b.ReportMetric(float64(v50.Nanoseconds()), "verify-p50-ns")
	b.ReportMetric(float64(b50.Nanoseconds()), "bare-ed25519-p50-ns")
	b.ReportMetric(float64(v50)/float64(b50), "ratio")
	b.ReportMetric(float64(c50.Nanoseconds()), "consume-p50-ns")
	if b.N > 1 {
		b.Logf("check 5 p50: verify %s, bare Ed25519 %s, ratio %.2f; consume (synced) %s", v50, b50, float64(v50)/float64(b50), c50)
	}
}

// p50 is the median of ds (medians, so that a noisy machine's stalls do
// not decide the ratio).
func p50(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}
