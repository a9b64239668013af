package trust

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"errors"
	"fmt"
	"time"
)

// Bundle is what a node trusts: the command-signing roots (the current one
// and, during a rotation, the others in pki.commandSigningRoots), the
// approver keys of the destructive-batch quorum and its threshold, and the
// break-glass allowance. Roots sign it; a node takes a new version only when
// a root it already trusts signed it.
type Bundle struct {
	// Version rises with the content and never goes below pki.trustVersion.
	Version int64 `json:"version"`
	// Roots are the command-signing roots.
	Roots []Root `json:"roots"`
	// Approvers are the destructive-batch approver keys.
	Approvers []Approver `json:"approvers,omitempty"`
	// ApprovalThreshold is how many distinct approvers a batch needs.
	ApprovalThreshold int `json:"approvalThreshold,omitempty"`
	// UnbatchedDestructivePerHour is the break-glass allowance.
	UnbatchedDestructivePerHour int `json:"unbatchedDestructivePerHour,omitempty"`
	// IssuedAt is when the bundle was signed: a lower bound of the time.
	IssuedAt time.Time `json:"issuedAt"`
	// ReleaseKeys sign bcd releases (daemon.upgrade verifies a release
	// statement against them, whatever the gateway says); none means the
	// node refuses every upgrade.
	ReleaseKeys []Root `json:"releaseKeys,omitempty"`
}

// Root is one command-signing root with its validity window.
type Root struct {
	PublicKey ed25519.PublicKey `json:"publicKey"`
	Window
}

// KeyID is the root's key id.
func (r Root) KeyID() string { return Ed25519KeyID(r.PublicKey) }

// Approver is one approver key of the quorum.
type Approver struct {
	Name      string            `json:"name,omitempty"`
	PublicKey ed25519.PublicKey `json:"publicKey"`
}

// KeyID is the approver key's id.
func (a Approver) KeyID() string { return Ed25519KeyID(a.PublicKey) }

// Errors of bundle updates.
var (
	ErrBundleRollback = errors.New("trust bundle version is lower than the one accepted")
	ErrBundleConflict = errors.New("trust bundle has the accepted version with other content")
)

// HasRoots reports whether commands must be signed.
func (b *Bundle) HasRoots() bool { return b != nil && len(b.Roots) > 0 }

// Root returns the root with the key id that is valid at t (within skew).
func (b *Bundle) Root(keyID string, t time.Time, skew time.Duration) (Root, error) {
	for _, r := range b.Roots {
		if r.KeyID() != keyID {
			continue
		}
		if !r.Contains(t, skew) {
			return r, fmt.Errorf("root %s: %w (%s..%s, now %s)", short(keyID), ErrExpired, fmtTime(r.NotBefore), fmtTime(r.NotAfter), fmtTime(t))
		}
		return r, nil
	}
	return Root{}, fmt.Errorf("root %s: %w: not in %s", short(keyID), ErrUnknownKey, b.name())
}

// name says which roots b holds in an error: a bundle's version, or, for
// version 0 (which no signed bundle has), a node's trust anchors standing
// in for the bundle it does not hold yet.
func (b *Bundle) name() string {
	if b.Version == 0 {
		return "the node's trust anchors (it holds no trust bundle yet)"
	}
	return fmt.Sprintf("trust bundle version %d", b.Version)
}

// SignBundle signs b's encoding with every root key given; at least one.
func SignBundle(b Bundle, keys ...ed25519.PrivateKey) ([]byte, error) {
	if len(keys) == 0 {
		return nil, errors.New("signing a trust bundle: no root key")
	}
	body, err := marshalJSON(b)
	if err != nil {
		return nil, err
	}
	s := Signed{Body: body}
	for _, k := range keys {
		s.Signatures = append(s.Signatures, Signature{KeyID: Ed25519KeyID(k.Public().(ed25519.PublicKey)), Sig: SignEd25519(k, PurposeTrustBundle, body)})
	}
	return s.Encode(), nil
}

// DecodeBundle reads a signed bundle's wire form without verifying it.
func DecodeBundle(b []byte) (Bundle, Signed, error) {
	s, err := DecodeSigned(b)
	if err != nil {
		return Bundle{}, s, fmt.Errorf("trust bundle: %w", err)
	}
	var bd Bundle
	if err := strictJSON(s.Body, &bd); err != nil {
		return bd, s, fmt.Errorf("%w: trust bundle body: %w", ErrMalformed, err)
	}
	if bd.Version < 1 {
		return bd, s, fmt.Errorf("%w: trust bundle version %d", ErrMalformed, bd.Version)
	}
	for i, r := range bd.Roots {
		if len(r.PublicKey) != ed25519.PublicKeySize {
			return bd, s, fmt.Errorf("%w: trust bundle root %d: public key of %d bytes", ErrMalformed, i, len(r.PublicKey))
		}
	}
	for i, a := range bd.Approvers {
		if len(a.PublicKey) != ed25519.PublicKeySize {
			return bd, s, fmt.Errorf("%w: trust bundle approver %d: public key of %d bytes", ErrMalformed, i, len(a.PublicKey))
		}
	}
	for i, r := range bd.ReleaseKeys {
		if len(r.PublicKey) != ed25519.PublicKeySize {
			return bd, s, fmt.Errorf("%w: trust bundle release key %d: public key of %d bytes", ErrMalformed, i, len(r.PublicKey))
		}
	}
	if bd.ApprovalThreshold < 0 || bd.ApprovalThreshold > len(bd.Approvers) {
		return bd, s, fmt.Errorf("%w: approval threshold %d with %d approvers", ErrMalformed, bd.ApprovalThreshold, len(bd.Approvers))
	}
	if bd.UnbatchedDestructivePerHour < 0 {
		return bd, s, fmt.Errorf("%w: unbatchedDestructivePerHour %d", ErrMalformed, bd.UnbatchedDestructivePerHour)
	}
	return bd, s, nil
}

// Digest is the SHA-256 of a bundle's signed body: two bundles of one
// version must have one digest.
func Digest(s Signed) [32]byte { return sha256.Sum256(s.Body) }

// verifiedBy reports whether one of roots (valid at now) signed s.
func verifiedBy(s Signed, roots []Root, now time.Time, skew time.Duration) error {
	var last error = fmt.Errorf("%w: no signature by a trusted root", ErrUnknownKey)
	for _, sig := range s.Signatures {
		for _, r := range roots {
			if r.KeyID() != sig.KeyID {
				continue
			}
			if !r.Contains(now, skew) {
				last = fmt.Errorf("root %s: %w", short(sig.KeyID), ErrExpired)
				continue
			}
			if err := VerifyEd25519(r.PublicKey, PurposeTrustBundle, s.Body, sig.Sig); err != nil {
				last = fmt.Errorf("root %s: %w", short(sig.KeyID), err)
				continue
			}
			return nil
		}
	}
	return last
}

// VerifyBundle checks a bundle that arrives at join, or from a seed: it
// must be signed by one of its own roots (or of anchors, when given), so a
// bundle is never taken whose roots did not sign it.
func VerifyBundle(wire []byte, anchors []Root, now time.Time) (Bundle, Signed, error) {
	b, s, err := DecodeBundle(wire)
	if err != nil {
		return b, s, err
	}
	roots := anchors
	if len(roots) == 0 {
		roots = b.Roots
	}
	if len(b.Roots) == 0 && len(anchors) == 0 {
		return b, s, fmt.Errorf("%w: trust bundle version %d holds no root to verify it", ErrUnknownKey, b.Version)
	}
	if err := verifiedBy(s, roots, now, DefaultClockSkew); err != nil {
		return b, s, fmt.Errorf("trust bundle version %d: %w", b.Version, err)
	}
	return b, s, nil
}

// VerifyUpdate checks a bundle offered in place of cur (which the node
// accepted with curSigned): a lower version is a rollback; the same version
// must be the same bytes; a higher version must be signed by a root of cur
// that is valid at now. It returns the bundle to keep and whether it is new.
func VerifyUpdate(cur Bundle, curSigned Signed, wire []byte, now time.Time) (Bundle, Signed, bool, error) {
	b, s, err := DecodeBundle(wire)
	if err != nil {
		return cur, curSigned, false, err
	}
	switch {
	case b.Version < cur.Version:
		return cur, curSigned, false, fmt.Errorf("%w: offered version %d, accepted %d", ErrBundleRollback, b.Version, cur.Version)
	case b.Version == cur.Version:
		if !bytes.Equal(s.Body, curSigned.Body) {
			return cur, curSigned, false, fmt.Errorf("%w: version %d", ErrBundleConflict, b.Version)
		}
		return cur, curSigned, false, nil
	}
	if err := verifiedBy(s, cur.Roots, now, DefaultClockSkew); err != nil {
		return cur, curSigned, false, fmt.Errorf("trust bundle version %d does not verify under version %d's roots: %w", b.Version, cur.Version, err)
	}
	return b, s, true, nil
}

func short(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}

func fmtTime(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}
