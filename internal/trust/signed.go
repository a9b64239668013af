package trust

import (
	"bytes"
	"encoding/json"
	"fmt"
	"time"
)

// Signed is the wire form of a signed document (a worker-key certificate, a
// trust bundle, a node spec): the exact body bytes and one signature or
// more over them. It is JSON with the body in base64, so the body is never
// re-encoded between the signer and the verifier.
type Signed struct {
	// Body is the signed document, exactly as signed.
	Body []byte `json:"body"`
	// Signatures are over PAE(purpose, Body), one per key.
	Signatures []Signature `json:"signatures"`
}

// Signature is one key's signature; KeyID is a hint, checked against the
// key that verifies.
type Signature struct {
	KeyID string `json:"keyId"`
	Sig   []byte `json:"sig"`
}

// maxSignedBytes bounds what a decoder reads: no trust document is near it.
const maxSignedBytes = 1 << 20

// DecodeSigned reads the wire form strictly: unknown fields, trailing data
// and an empty body are errors.
func DecodeSigned(b []byte) (Signed, error) {
	var s Signed
	if len(b) > maxSignedBytes {
		return s, fmt.Errorf("%w: signed document of %d bytes (limit %d)", ErrMalformed, len(b), maxSignedBytes)
	}
	if err := strictJSON(b, &s); err != nil {
		return s, fmt.Errorf("%w: signed document: %w", ErrMalformed, err)
	}
	if len(s.Body) == 0 {
		return s, fmt.Errorf("%w: signed document without a body", ErrMalformed)
	}
	if len(s.Signatures) == 0 {
		return s, fmt.Errorf("%w: signed document without a signature", ErrMalformed)
	}
	return s, nil
}

// Encode is the wire form.
func (s Signed) Encode() []byte {
	b, err := json.Marshal(s)
	if err != nil {
		// Bytes and strings always marshal.
		panic(fmt.Sprintf("trust: encoding a signed document: %v", err))
	}
	return b
}

// strictJSON decodes one JSON value into v, refusing unknown fields and
// trailing data, so two readers never see two different documents.
func strictJSON(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return fmt.Errorf("trailing data after the JSON value")
	}
	var extra json.RawMessage
	if err := dec.Decode(&extra); err == nil {
		return fmt.Errorf("trailing data after the JSON value")
	}
	return nil
}

// Window is a validity window; a zero end is open.
type Window struct {
	NotBefore time.Time `json:"notBefore"`
	NotAfter  time.Time `json:"notAfter"`
}

// Contains reports whether t is within the window, widened by skew on both
// sides.
func (w Window) Contains(t time.Time, skew time.Duration) bool {
	if !w.NotBefore.IsZero() && t.Add(skew).Before(w.NotBefore) {
		return false
	}
	if !w.NotAfter.IsZero() && !t.Add(-skew).Before(w.NotAfter) {
		return false
	}
	return true
}
