package trust

import (
	"encoding/json"
	"fmt"
	"time"
)

// SpecStatement is what the control plane signs for one node spec
// generation (purpose desired-state): the node it is for, the generation
// and the spec document. The node applies the spec and generation the
// statement names, never the unsigned fields beside it.
type SpecStatement struct {
	NodeID     string          `json:"nodeId"`
	Generation int64           `json:"generation"`
	Spec       json.RawMessage `json:"spec"`
}

// Encode is the statement's signed bytes.
func (s SpecStatement) Encode() ([]byte, error) {
	if s.NodeID == "" || s.Generation < 1 {
		return nil, fmt.Errorf("%w: spec statement for node %q generation %d", ErrMalformed, s.NodeID, s.Generation)
	}
	if len(s.Spec) == 0 {
		s.Spec = json.RawMessage(`{}`)
	}
	return marshalJSON(s)
}

// DecodeSpecStatement reads a statement strictly.
func DecodeSpecStatement(b []byte) (SpecStatement, error) {
	var s SpecStatement
	if len(b) > maxSignedBytes {
		return s, fmt.Errorf("%w: spec statement of %d bytes", ErrMalformed, len(b))
	}
	if err := strictJSON(b, &s); err != nil {
		return s, fmt.Errorf("%w: spec statement: %w", ErrMalformed, err)
	}
	if s.NodeID == "" || s.Generation < 1 {
		return s, fmt.Errorf("%w: spec statement for node %q generation %d", ErrMalformed, s.NodeID, s.Generation)
	}
	return s, nil
}

// VerifySpec checks a signed spec for nodeID against the bundle: a worker
// key the bundle's roots certify for desired-state signed the statement,
// and the statement names this node. It returns the statement to apply.
func VerifySpec(b *Bundle, certWire, statement, sig []byte, nodeID string, now time.Time) (SpecStatement, error) {
	if _, err := VerifyWorkerSigned(b, certWire, PurposeDesiredState, statement, sig, now); err != nil {
		return SpecStatement{}, err
	}
	s, err := DecodeSpecStatement(statement)
	if err != nil {
		return s, err
	}
	if s.NodeID != nodeID {
		return s, fmt.Errorf("%w: spec signed for node %q, this is %q", ErrBadSignature, s.NodeID, nodeID)
	}
	return s, nil
}

// AllocationBound is the node's own statement that it applied a spec
// binding GPUs (or their MIG instances or slots) to an allocation. The
// control plane marks the allocation active only once it verifies against
// the node's certificate.
type AllocationBound struct {
	Allocation string   `json:"allocation"`
	NodeID     string   `json:"nodeId"`
	GPUs       []string `json:"gpus"`
	Generation int64    `json:"generation"`
}

// Encode is the statement's signed bytes.
func (a AllocationBound) Encode() ([]byte, error) {
	if a.Allocation == "" || a.NodeID == "" || len(a.GPUs) == 0 || a.Generation < 1 {
		return nil, fmt.Errorf("%w: allocation-bound statement %+v", ErrMalformed, a)
	}
	return marshalJSON(a)
}

// DecodeAllocationBound reads a statement strictly.
func DecodeAllocationBound(b []byte) (AllocationBound, error) {
	var a AllocationBound
	if len(b) > maxSignedBytes {
		return a, fmt.Errorf("%w: allocation-bound statement of %d bytes", ErrMalformed, len(b))
	}
	if err := strictJSON(b, &a); err != nil {
		return a, fmt.Errorf("%w: allocation-bound statement: %w", ErrMalformed, err)
	}
	if a.Allocation == "" || a.NodeID == "" || len(a.GPUs) == 0 || a.Generation < 1 {
		return a, fmt.Errorf("%w: allocation-bound statement %+v", ErrMalformed, a)
	}
	return a, nil
}
