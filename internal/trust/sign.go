package trust

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"

	"github.com/secure-systems-lab/go-securesystemslib/dsse"
)

// Purpose is the payload type a signature is made for. Each message class
// has its own, and what is signed is DSSE's pre-authentication encoding of
// the purpose and the exact bytes, so a signature made for one purpose never
// verifies for another (a worker-key certificate is not a command, a command
// is not a spec), and nothing is re-marshalled before it is verified.
type Purpose string

// The purposes, one per message class.
const (
	PurposeCommand         Purpose = "application/vnd.better-compute.command.v1+proto"
	PurposeDesiredState    Purpose = "application/vnd.better-compute.desired-state.v1+json"
	PurposeCommandUpdate   Purpose = "application/vnd.better-compute.command-update.v1+json"
	PurposeWorkerKey       Purpose = "application/vnd.better-compute.worker-key.v1+json"
	PurposeTrustBundle     Purpose = "application/vnd.better-compute.trust-bundle.v1+json"
	PurposeBatchApproval   Purpose = "application/vnd.better-compute.batch-approval.v1+json"
	PurposeAllocationBound Purpose = "application/vnd.better-compute.allocation-bound.v1+json"
	PurposeRelease         Purpose = "application/vnd.better-compute.release.v1+json"
)

// Errors of signature checks. Each is wrapped with what was checked.
var (
	ErrBadSignature = errors.New("signature does not verify")
	ErrUnknownKey   = errors.New("signed by a key that is not trusted")
	ErrExpired      = errors.New("outside its validity window")
	ErrMalformed    = errors.New("malformed")
)

// PAE is the bytes a signature covers: DSSE's pre-authentication encoding
// of the purpose and the body.
func PAE(p Purpose, body []byte) []byte { return dsse.PAE(string(p), body) }

// SignEd25519 signs body for purpose p.
func SignEd25519(key ed25519.PrivateKey, p Purpose, body []byte) []byte {
	return ed25519.Sign(key, PAE(p, body))
}

// VerifyEd25519 checks an Ed25519 signature over body for purpose p.
func VerifyEd25519(pub ed25519.PublicKey, p Purpose, body, sig []byte) error {
	if len(pub) != ed25519.PublicKeySize {
		return fmt.Errorf("%w: public key of %d bytes", ErrMalformed, len(pub))
	}
	if !ed25519.Verify(pub, PAE(p, body), sig) {
		return ErrBadSignature
	}
	return nil
}

// SignWith signs body for purpose p with any crypto.Signer: Ed25519 signs
// the encoding itself, ECDSA (a node key) its SHA-256, ASN.1 encoded.
func SignWith(s crypto.Signer, p Purpose, body []byte) ([]byte, error) {
	msg := PAE(p, body)
	switch s.Public().(type) {
	case ed25519.PublicKey:
		return s.Sign(nil, msg, crypto.Hash(0))
	case *ecdsa.PublicKey:
		d := sha256.Sum256(msg)
		return s.Sign(nil, d[:], crypto.SHA256)
	default:
		return nil, fmt.Errorf("signing: unsupported key type %T", s.Public())
	}
}

// VerifyWith checks a signature made by SignWith against pub.
func VerifyWith(pub crypto.PublicKey, p Purpose, body, sig []byte) error {
	msg := PAE(p, body)
	switch k := pub.(type) {
	case ed25519.PublicKey:
		return VerifyEd25519(k, p, body, sig)
	case *ecdsa.PublicKey:
		d := sha256.Sum256(msg)
		if !ecdsa.VerifyASN1(k, d[:], sig) {
			return ErrBadSignature
		}
		return nil
	default:
		return fmt.Errorf("verifying: unsupported key type %T", pub)
	}
}

// KeyID is the SHA-256 of a public key's PKIX encoding, in hex. It is
// derived from the key, so a key id in a message is only a hint that never
// lets one key count twice.
func KeyID(pub crypto.PublicKey) (string, error) {
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return "", fmt.Errorf("key id: %w", err)
	}
	sum := sha256.Sum256(der)
	return hex.EncodeToString(sum[:]), nil
}

// Ed25519KeyID is KeyID for an Ed25519 key, which always encodes.
func Ed25519KeyID(pub ed25519.PublicKey) string {
	id, err := KeyID(pub)
	if err != nil {
		// A 32-byte key always marshals; a shorter one is a caller bug.
		return "invalid-key"
	}
	return id
}
