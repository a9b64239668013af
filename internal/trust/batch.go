package trust

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/transparency-dev/merkle/proof"
	"github.com/transparency-dev/merkle/rfc6962"
)

// A destructive batch's scope is an RFC 6962 Merkle tree over its leaves;
// approvers sign the root (with the batch id, the tree size, the deadline
// and the requester). A node that receives a batched command recomputes its
// own leaf from its own node id, the command's kind and the SHA-256 of the
// payload it received, and checks the inclusion proof against the approved
// root: it never trusts a leaf hash it is handed.

// Leaf is one (subject, kind) a batch allows, bound to one payload when
// PayloadSHA256 is set.
type Leaf struct {
	Subject       string
	Kind          string
	PayloadSHA256 []byte // nil: any payload
}

const leafVersion = 1

// Encode is the leaf's one encoding: a version byte, then the subject and
// the kind each length-prefixed (uint16), then a byte that says whether a
// payload digest follows, then the 32-byte digest.
func (l Leaf) Encode() ([]byte, error) {
	if l.Subject == "" || l.Kind == "" || len(l.Subject) > 0xffff || len(l.Kind) > 0xffff {
		return nil, fmt.Errorf("%w: batch leaf %q/%q", ErrMalformed, l.Subject, l.Kind)
	}
	if l.PayloadSHA256 != nil && len(l.PayloadSHA256) != 32 {
		return nil, fmt.Errorf("%w: batch leaf payload digest of %d bytes", ErrMalformed, len(l.PayloadSHA256))
	}
	var b bytes.Buffer
	b.WriteByte(leafVersion)
	for _, s := range []string{l.Subject, l.Kind} {
		_ = binary.Write(&b, binary.BigEndian, uint16(len(s)))
		b.WriteString(s)
	}
	if l.PayloadSHA256 == nil {
		b.WriteByte(0)
	} else {
		b.WriteByte(1)
		b.Write(l.PayloadSHA256)
	}
	return b.Bytes(), nil
}

// LeafHash is the RFC 6962 leaf hash of the leaf.
func (l Leaf) LeafHash() ([]byte, error) {
	e, err := l.Encode()
	if err != nil {
		return nil, err
	}
	return rfc6962.DefaultHasher.HashLeaf(e), nil
}

// Tree is a batch's scope as a Merkle tree: its leaves sorted and
// deduplicated, so one scope always makes one root.
type Tree struct {
	Leaves []Leaf
	hashes [][]byte
}

// NewTree sorts and deduplicates leaves and hashes them.
func NewTree(leaves []Leaf) (*Tree, error) {
	if len(leaves) == 0 {
		return nil, fmt.Errorf("%w: a batch needs at least one leaf", ErrMalformed)
	}
	type enc struct {
		l Leaf
		b []byte
	}
	var es []enc
	for _, l := range leaves {
		b, err := l.Encode()
		if err != nil {
			return nil, err
		}
		es = append(es, enc{l, b})
	}
	sort.Slice(es, func(i, j int) bool { return bytes.Compare(es[i].b, es[j].b) < 0 })
	t := &Tree{}
	for i, e := range es {
		if i > 0 && bytes.Equal(es[i-1].b, e.b) {
			continue
		}
		t.Leaves = append(t.Leaves, e.l)
		t.hashes = append(t.hashes, rfc6962.DefaultHasher.HashLeaf(e.b))
	}
	return t, nil
}

// Size is the number of leaves.
func (t *Tree) Size() uint64 { return uint64(len(t.hashes)) }

// Root is the tree's RFC 6962 root hash.
func (t *Tree) Root() []byte { return mth(t.hashes) }

// Index returns the index of the leaf that names subject and kind, bound
// to payloadSHA256 when such a leaf exists, else the unbound one; false
// when none allows it.
func (t *Tree) Index(subject, kind string, payloadSHA256 []byte) (uint64, bool) {
	unbound := -1
	for i, l := range t.Leaves {
		if l.Subject != subject || l.Kind != kind {
			continue
		}
		if l.PayloadSHA256 == nil {
			unbound = i
		} else if bytes.Equal(l.PayloadSHA256, payloadSHA256) {
			return uint64(i), true
		}
	}
	if unbound >= 0 {
		return uint64(unbound), true
	}
	return 0, false
}

// Proof is the inclusion proof (audit path) of leaf index.
func (t *Tree) Proof(index uint64) ([][]byte, error) {
	if index >= t.Size() {
		return nil, fmt.Errorf("%w: leaf %d of a tree of %d", ErrMalformed, index, t.Size())
	}
	return path(index, t.hashes), nil
}

// mth is RFC 6962's Merkle Tree Hash of leaf hashes (section 2.1).
func mth(hs [][]byte) []byte {
	switch len(hs) {
	case 0:
		return rfc6962.DefaultHasher.EmptyRoot()
	case 1:
		return hs[0]
	}
	k := split(len(hs))
	return rfc6962.DefaultHasher.HashChildren(mth(hs[:k]), mth(hs[k:]))
}

// path is RFC 6962's PATH(m, D[n]) (section 2.1.1).
func path(m uint64, hs [][]byte) [][]byte {
	if len(hs) <= 1 {
		return nil
	}
	k := uint64(split(len(hs)))
	if m < k {
		return append(path(m, hs[:k]), mth(hs[k:]))
	}
	return append(path(m-k, hs[k:]), mth(hs[:k]))
}

// split is the largest power of two smaller than n.
func split(n int) int {
	k := 1
	for k*2 < n {
		k *= 2
	}
	return k
}

// BatchStatement is what approvers sign (purpose batch-approval): the batch,
// its tree, its deadline and who asked for it, who may not approve it.
type BatchStatement struct {
	BatchID   string    `json:"batchId"`
	TreeSize  uint64    `json:"treeSize"`
	RootHash  string    `json:"rootHash"` // hex
	NotAfter  time.Time `json:"notAfter"`
	Requester string    `json:"requester"`
}

// Encode is the statement's signed bytes.
func (s BatchStatement) Encode() ([]byte, error) {
	if s.BatchID == "" || s.TreeSize == 0 || len(s.RootHash) != 64 || s.NotAfter.IsZero() {
		return nil, fmt.Errorf("%w: batch statement %+v", ErrMalformed, s)
	}
	s.NotAfter = s.NotAfter.UTC().Truncate(time.Second)
	return marshalJSON(s)
}

// DecodeBatchStatement reads a statement strictly.
func DecodeBatchStatement(b []byte) (BatchStatement, error) {
	var s BatchStatement
	if len(b) > maxSignedBytes {
		return s, fmt.Errorf("%w: batch statement of %d bytes", ErrMalformed, len(b))
	}
	if err := strictJSON(b, &s); err != nil {
		return s, fmt.Errorf("%w: batch statement: %w", ErrMalformed, err)
	}
	if s.BatchID == "" || s.TreeSize == 0 || len(s.RootHash) != 64 || s.NotAfter.IsZero() {
		return s, fmt.Errorf("%w: batch statement %+v", ErrMalformed, s)
	}
	if _, err := hex.DecodeString(s.RootHash); err != nil {
		return s, fmt.Errorf("%w: batch statement root hash: %w", ErrMalformed, err)
	}
	return s, nil
}

// SignApproval is one approver's signature over a statement.
func SignApproval(key ed25519.PrivateKey, statement []byte) Signature {
	return Signature{KeyID: Ed25519KeyID(key.Public().(ed25519.PublicKey)), Sig: SignEd25519(key, PurposeBatchApproval, statement)}
}

// Errors of batch checks.
var (
	ErrTooFewApprovals = errors.New("too few distinct approvers signed the batch")
	ErrBatchExpired    = errors.New("the batch's approval is past its deadline")
	ErrNotInBatch      = errors.New("the command is not a leaf of the approved batch")
)

// BatchCheck is what a node checks of a batched command.
type BatchCheck struct {
	// Approval is the approvers' signatures over the statement (the wire
	// form of a Signed: the statement is its body).
	Approval []byte
	// LeafIndex and Proof place the node's leaf in the tree.
	LeafIndex uint64
	Proof     [][]byte
	// BatchID is the batch the command names (signed in the command).
	BatchID string
	// NodeID, Kind and PayloadSHA256 are the node's own: its id, the
	// command's kind and the SHA-256 of the payload it received.
	NodeID        string
	Kind          string
	PayloadSHA256 []byte
}

// VerifyBatch checks c against the bundle's approvers: the approval is over
// a statement for c's batch, at least ApprovalThreshold distinct approver
// keys of the bundle signed it (the requester's own key never counts), it
// is within its deadline, and the leaf the node computes itself (bound to
// its payload, or unbound) is at LeafIndex under the signed root. It
// returns the statement.
func VerifyBatch(b *Bundle, c BatchCheck, now time.Time) (BatchStatement, error) {
	if b == nil || len(b.Approvers) == 0 {
		return BatchStatement{}, fmt.Errorf("%w: the trust bundle holds no approver key", ErrUnknownKey)
	}
	s, err := DecodeSigned(c.Approval)
	if err != nil {
		return BatchStatement{}, fmt.Errorf("batch approval: %w", err)
	}
	st, err := DecodeBatchStatement(s.Body)
	if err != nil {
		return st, err
	}
	if st.BatchID != c.BatchID {
		return st, fmt.Errorf("%w: the approval is for batch %s, the command names %s", ErrNotInBatch, st.BatchID, c.BatchID)
	}
	if !now.Add(-DefaultClockSkew).Before(st.NotAfter) {
		return st, fmt.Errorf("%w (%s)", ErrBatchExpired, st.NotAfter.UTC().Format(time.RFC3339))
	}
	counted := map[string]bool{}
	for _, sig := range s.Signatures {
		for _, a := range b.Approvers {
			id := a.KeyID()
			if id != sig.KeyID || counted[id] {
				continue
			}
			if a.Name != "" && a.Name == st.Requester {
				continue // "the requester cannot approve their own batch"
			}
			if VerifyEd25519(a.PublicKey, PurposeBatchApproval, s.Body, sig.Sig) == nil {
				counted[id] = true
			}
		}
	}
	threshold := b.ApprovalThreshold
	if threshold <= 0 {
		threshold = len(b.Approvers)
	}
	if len(counted) < threshold {
		return st, fmt.Errorf("%w: %d of %d needed", ErrTooFewApprovals, len(counted), threshold)
	}
	root, _ := hex.DecodeString(st.RootHash)
	var lastErr error
	for _, l := range []Leaf{{Subject: c.NodeID, Kind: c.Kind, PayloadSHA256: c.PayloadSHA256}, {Subject: c.NodeID, Kind: c.Kind}} {
		lh, err := l.LeafHash()
		if err != nil {
			return st, err
		}
		if lastErr = proof.VerifyInclusion(rfc6962.DefaultHasher, c.LeafIndex, st.TreeSize, lh, c.Proof, root); lastErr == nil {
			return st, nil
		}
	}
	return st, fmt.Errorf("%w: %v", ErrNotInBatch, lastErr) //nolint:errorlint // the outcome is ErrNotInBatch alone: the last candidate's error is detail, not a second sentinel to match
}

// proofRoot is the root an inclusion proof leads to (the library's).
func proofRoot(index, size uint64, leafHash []byte, p [][]byte) ([]byte, error) {
	return proof.RootFromInclusionProof(rfc6962.DefaultHasher, index, size, leafHash, p)
}

// PayloadDigest is the SHA-256 a batch leaf binds a payload with: over the
// payload's canonical JSON (keys sorted, compact), so the digest a person
// computes from the payload they meant is the one the node computes from
// the bytes it received, whatever spacing or key order either used. A
// payload that is not JSON is hashed as it is.
func PayloadDigest(payload []byte) []byte {
	var v any
	b := payload
	if err := json.Unmarshal(payload, &v); err == nil {
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(false)
		if enc.Encode(v) == nil {
			b = bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
		}
	}
	sum := sha256.Sum256(b)
	return sum[:]
}
