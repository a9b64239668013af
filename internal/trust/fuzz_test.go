package trust

import (
	"encoding/hex"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	agentv1 "github.com/better-compute/commands/proto/bc/agent/v1"
)

// fuzzSeeds are valid documents of each decoder, so the fuzzer starts from
// the shapes that matter (the testdata/fuzz corpora add malformed ones).
func fuzzSeeds(f *testing.F) (bundle, cert []byte, env []byte) {
	root := key(f)
	w, err := NewWorkerKey(root, t0, time.Hour)
	if err != nil {
		f.Fatal(err)
	}
	b := bundleOf(1, root)
	b.Approvers = []Approver{{Name: "alice", PublicKey: pub(key(f))}}
	b.ApprovalThreshold = 1
	bundle, err = SignBundle(*b, root)
	if err != nil {
		f.Fatal(err)
	}
	e := signedCommand(f, w, testCommand("n"))
	env, err = proto.Marshal(e)
	if err != nil {
		f.Fatal(err)
	}
	return bundle, w.Cert, env
}

func FuzzDecodeSigned(f *testing.F) {
	b, c, _ := fuzzSeeds(f)
	f.Add(b)
	f.Add(c)
	f.Fuzz(func(t *testing.T, in []byte) {
		s, err := DecodeSigned(in)
		if err != nil {
			return
		}
		// What decodes re-encodes to a document that decodes the same.
		s2, err := DecodeSigned(s.Encode())
		if err != nil || string(s2.Body) != string(s.Body) || len(s2.Signatures) != len(s.Signatures) {
			t.Fatalf("round trip: %v", err)
		}
	})
}

func FuzzDecodeBundle(f *testing.F) {
	b, _, _ := fuzzSeeds(f)
	f.Add(b)
	f.Fuzz(func(t *testing.T, in []byte) {
		bd, s, err := DecodeBundle(in)
		if err != nil {
			return
		}
		if bd.Version < 1 || bd.ApprovalThreshold > len(bd.Approvers) || len(s.Body) == 0 {
			t.Fatalf("decoded an invalid bundle: %+v", bd)
		}
		_, _, _ = VerifyBundle(in, nil, t0)
	})
}

func FuzzDecodeWorkerCert(f *testing.F) {
	_, c, _ := fuzzSeeds(f)
	f.Add(c)
	f.Fuzz(func(t *testing.T, in []byte) {
		wc, _, err := DecodeWorkerCert(in)
		if err != nil {
			return
		}
		if wc.NotAfter.Sub(wc.NotBefore) > MaxWorkerKeyLifetime || len(wc.PublicKey) != 32 {
			t.Fatalf("decoded an invalid certificate: %+v", wc)
		}
	})
}

// FuzzVerifyCommand feeds arbitrary envelopes to check 4: nothing but the
// one signed command may verify, and nothing panics.
func FuzzVerifyCommand(f *testing.F) {
	root := key(f)
	w, err := NewWorkerKey(root, t0, time.Hour)
	if err != nil {
		f.Fatal(err)
	}
	good := signedCommand(f, w, testCommand("n"))
	seed, _ := proto.Marshal(good)
	f.Add(seed)
	b := bundleOf(1, root)
	f.Fuzz(func(t *testing.T, in []byte) {
		var env agentv1.CommandEnvelope
		if proto.Unmarshal(in, &env) != nil {
			return
		}
		c, err := VerifyCommand(b, &env, "n", t0)
		if err == nil && (string(env.GetCommand()) != string(good.GetCommand()) || c.GetNodeId() != "n") {
			t.Fatalf("a command that was never signed verified: %x", env.GetCommand())
		}
	})
}

func FuzzDecodeSpecStatement(f *testing.F) {
	good, _ := SpecStatement{NodeID: "n", Generation: 3, Spec: []byte(`{"holds":[{"gpu":"GPU-1","state":"live"}]}`)}.Encode()
	f.Add(good)
	f.Add([]byte(`{"nodeId":"n","generation":0,"spec":{}}`))
	f.Fuzz(func(t *testing.T, in []byte) {
		s, err := DecodeSpecStatement(in)
		if err != nil {
			return
		}
		if s.NodeID == "" || s.Generation < 1 {
			t.Fatalf("decoded an invalid statement: %+v", s)
		}
	})
}

func FuzzDecodeAllocationBound(f *testing.F) {
	good, _ := AllocationBound{Allocation: "alloc_1", NodeID: "n", GPUs: []string{"GPU-1"}, Generation: 2}.Encode()
	f.Add(good)
	f.Fuzz(func(t *testing.T, in []byte) {
		a, err := DecodeAllocationBound(in)
		if err == nil && (a.Allocation == "" || len(a.GPUs) == 0) {
			t.Fatalf("decoded an invalid statement: %+v", a)
		}
	})
}

func FuzzDecodeBatchStatement(f *testing.F) {
	good, _ := BatchStatement{BatchID: "batch_1", TreeSize: 3, RootHash: "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff", NotAfter: t0, Requester: "dave"}.Encode()
	f.Add(good)
	f.Fuzz(func(t *testing.T, in []byte) {
		s, err := DecodeBatchStatement(in)
		if err == nil && (s.BatchID == "" || s.TreeSize == 0 || len(s.RootHash) != 64) {
			t.Fatalf("decoded an invalid statement: %+v", s)
		}
	})
}

// FuzzVerifyBatch feeds arbitrary approvals and proofs to check 5: nothing
// but the one approved leaf may verify, and nothing panics.
func FuzzVerifyBatch(f *testing.F) {
	alice, bob := key(f), key(f)
	b := &Bundle{Version: 1, ApprovalThreshold: 2, Approvers: []Approver{{Name: "alice", PublicKey: pub(alice)}, {Name: "bob", PublicKey: pub(bob)}}}
	tr, _ := NewTree([]Leaf{{Subject: "node_a", Kind: "node.reboot"}, {Subject: "node_b", Kind: "node.reboot"}})
	stmt, _ := BatchStatement{BatchID: "batch_1", TreeSize: tr.Size(), RootHash: hex.EncodeToString(tr.Root()), NotAfter: t0.Add(time.Hour), Requester: "dave"}.Encode()
	appr := Signed{Body: stmt, Signatures: []Signature{SignApproval(alice, stmt), SignApproval(bob, stmt)}}.Encode()
	p, _ := tr.Proof(0)
	var flat []byte
	for _, x := range p {
		flat = append(flat, x...)
	}
	f.Add(appr, uint64(0), flat)
	f.Fuzz(func(t *testing.T, approval []byte, index uint64, proofBytes []byte) {
		var pr [][]byte
		for len(proofBytes) >= 32 {
			pr = append(pr, proofBytes[:32])
			proofBytes = proofBytes[32:]
		}
		_, err := VerifyBatch(b, BatchCheck{Approval: approval, LeafIndex: index, Proof: pr, BatchID: "batch_1", NodeID: "node_c", Kind: "node.reboot"}, t0)
		if err == nil {
			t.Fatalf("node_c is in no batch, yet it verified")
		}
	})
}
