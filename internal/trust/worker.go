package trust

import (
	"crypto/ed25519"
	"fmt"
	"time"
)

// VerifyWorkerSigned checks what a worker key signed: certWire is a
// worker-key certificate that a root in b valid at now signed, within its
// own window (both with DefaultClockSkew), for purpose p; sig is the worker
// key's signature over body for p. body is verified as received.
func VerifyWorkerSigned(b *Bundle, certWire []byte, p Purpose, body, sig []byte, now time.Time) (WorkerCert, error) {
	c, _, err := verifyWorkerCert(b, certWire, sig, now)
	if err != nil {
		return c, err
	}
	return c, c.verifySigned(p, body, sig, now)
}

// verifyWorkerCert is the certificate half of VerifyWorkerSigned: the
// certificate decodes and a root in b that is valid at now signed it. It
// returns the certificate and the key id of the root that signed it.
func verifyWorkerCert(b *Bundle, certWire, sig []byte, now time.Time) (WorkerCert, string, error) {
	if !b.HasRoots() {
		return WorkerCert{}, "", fmt.Errorf("%w: the trust bundle holds no command-signing root", ErrUnknownKey)
	}
	if len(certWire) == 0 {
		return WorkerCert{}, "", fmt.Errorf("%w: no worker-key certificate", ErrMalformed)
	}
	if len(sig) == 0 {
		return WorkerCert{}, "", fmt.Errorf("%w: unsigned", ErrBadSignature)
	}
	c, s, err := DecodeWorkerCert(certWire)
	if err != nil {
		return c, "", err
	}
	var certErr error = fmt.Errorf("worker key %s: %w: its certificate names no root of %s", short(c.KeyID()), ErrUnknownKey, b.name())
	for _, cs := range s.Signatures {
		r, err := b.Root(cs.KeyID, now, DefaultClockSkew)
		if err != nil {
			certErr = fmt.Errorf("worker key %s: %w", short(c.KeyID()), err)
			continue
		}
		if err := VerifyEd25519(r.PublicKey, PurposeWorkerKey, s.Body, cs.Sig); err != nil {
			certErr = fmt.Errorf("worker key %s: certificate by root %s: %w", short(c.KeyID()), short(cs.KeyID), err)
			continue
		}
		return c, cs.KeyID, nil
	}
	return c, "", certErr
}

// verifySigned is the signature half: the certificate is within its window
// at now and covers p, and its key signed body for p.
func (c WorkerCert) verifySigned(p Purpose, body, sig []byte, now time.Time) error {
	if !c.Contains(now, DefaultClockSkew) {
		return fmt.Errorf("worker key %s: %w (%s..%s, now %s)", short(c.KeyID()), ErrExpired, fmtTime(c.NotBefore), fmtTime(c.NotAfter), fmtTime(now))
	}
	if !c.Allows(p) {
		return fmt.Errorf("worker key %s: %w: not certified for %s", short(c.KeyID()), ErrUnknownKey, p)
	}
	if err := VerifyEd25519(c.PublicKey, p, body, sig); err != nil {
		return fmt.Errorf("worker key %s: %w", short(c.KeyID()), err)
	}
	return nil
}

// WorkerKey is a worker key and its certificate: what bc-server signs
// commands and node specs with. It holds no root.
type WorkerKey struct {
	Key  ed25519.PrivateKey
	Cert []byte
	// Window is the certificate's window, for renewal.
	Window
}

// NewWorkerKey makes a worker key and has root certify it for commands and
// node specs from notBefore for lifetime.
func NewWorkerKey(root ed25519.PrivateKey, notBefore time.Time, lifetime time.Duration) (*WorkerKey, error) {
	pub, priv, err := NewEd25519()
	if err != nil {
		return nil, err
	}
	cert, err := IssueWorkerCert(root, pub, notBefore, lifetime, PurposeCommand, PurposeDesiredState)
	if err != nil {
		return nil, err
	}
	c, _, err := DecodeWorkerCert(cert)
	if err != nil {
		return nil, err
	}
	return &WorkerKey{Key: priv, Cert: cert, Window: c.Window}, nil
}

// Sign signs body for purpose p.
func (w *WorkerKey) Sign(p Purpose, body []byte) []byte { return SignEd25519(w.Key, p, body) }

// KeyIDShort is the worker key's id, shortened for logs.
func (w *WorkerKey) KeyIDShort() string {
	return short(Ed25519KeyID(w.Key.Public().(ed25519.PublicKey)))
}
