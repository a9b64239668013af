package trust

import (
	"crypto/ed25519"
	"fmt"
	"slices"
	"time"
)

// MaxWorkerKeyLifetime is the longest a worker-key certificate may be valid:
// the spec's 24-hour worker keys.
const MaxWorkerKeyLifetime = 24 * time.Hour

// DefaultClockSkew is how far apart two clocks may be when a validity
// window is checked: the worker-key certificate's, a root's, and the
// offset a Welcome may move the node's clock by.
const DefaultClockSkew = 5 * time.Minute

// WorkerCert is a worker key that a command-signing root certifies for some
// purposes (commands and node specs) for at most a day.
type WorkerCert struct {
	// PublicKey is the worker's Ed25519 key.
	PublicKey ed25519.PublicKey `json:"publicKey"`
	// RootKeyID names the root that signs the certificate (a hint).
	RootKeyID string `json:"rootKeyId"`
	// Purposes are what the worker key may sign.
	Purposes []Purpose `json:"purposes"`
	Window
}

// KeyID is the worker key's id.
func (c WorkerCert) KeyID() string { return Ed25519KeyID(c.PublicKey) }

// Allows reports whether the certificate covers purpose p.
func (c WorkerCert) Allows(p Purpose) bool { return slices.Contains(c.Purposes, p) }

// IssueWorkerCert certifies pub with root for purposes over [notBefore,
// notBefore+lifetime]; it returns the certificate's wire form.
func IssueWorkerCert(root ed25519.PrivateKey, pub ed25519.PublicKey, notBefore time.Time, lifetime time.Duration, purposes ...Purpose) ([]byte, error) {
	if lifetime <= 0 || lifetime > MaxWorkerKeyLifetime {
		return nil, fmt.Errorf("worker key lifetime %s: must be within (0, %s]", lifetime, MaxWorkerKeyLifetime)
	}
	if len(purposes) == 0 {
		return nil, fmt.Errorf("worker key: no purpose")
	}
	rootPub := root.Public().(ed25519.PublicKey)
	c := WorkerCert{
		PublicKey: pub, RootKeyID: Ed25519KeyID(rootPub), Purposes: purposes,
		Window: Window{NotBefore: notBefore.UTC().Truncate(time.Second), NotAfter: notBefore.Add(lifetime).UTC().Truncate(time.Second)},
	}
	body, err := marshalJSON(c)
	if err != nil {
		return nil, err
	}
	return Signed{Body: body, Signatures: []Signature{{KeyID: c.RootKeyID, Sig: SignEd25519(root, PurposeWorkerKey, body)}}}.Encode(), nil
}

// DecodeWorkerCert reads a certificate's wire form without verifying it.
func DecodeWorkerCert(b []byte) (WorkerCert, Signed, error) {
	s, err := DecodeSigned(b)
	if err != nil {
		return WorkerCert{}, s, fmt.Errorf("worker certificate: %w", err)
	}
	var c WorkerCert
	if err := strictJSON(s.Body, &c); err != nil {
		return c, s, fmt.Errorf("%w: worker certificate body: %w", ErrMalformed, err)
	}
	if len(c.PublicKey) != ed25519.PublicKeySize {
		return c, s, fmt.Errorf("%w: worker certificate: public key of %d bytes", ErrMalformed, len(c.PublicKey))
	}
	if c.NotBefore.IsZero() || c.NotAfter.IsZero() || !c.NotBefore.Before(c.NotAfter) {
		return c, s, fmt.Errorf("%w: worker certificate: validity window %s..%s", ErrMalformed, c.NotBefore, c.NotAfter)
	}
	if c.NotAfter.Sub(c.NotBefore) > MaxWorkerKeyLifetime {
		return c, s, fmt.Errorf("%w: worker certificate valid for %s, more than %s", ErrMalformed, c.NotAfter.Sub(c.NotBefore), MaxWorkerKeyLifetime)
	}
	return c, s, nil
}
