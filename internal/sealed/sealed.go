// Package sealed is the secretRef exchange's cryptography, shared by bcd
// (which makes a one-time key per command and opens) and the control plane
// (which seals): HPKE (RFC 9180, Go's crypto/hpke) in base mode with
// DHKEM(X25519, HKDF-SHA256), HKDF-SHA256 and ChaCha20-Poly1305. The info
// string binds a sealed value to its node, command and ref, so a gateway
// that relays it can neither hand one command's secret to another nor swap
// two refs of one command.
package sealed

import (
	"crypto/ecdh"
	"crypto/hpke"
	"errors"
	"fmt"
	"regexp"
	"strings"
)

// KEMID is the HPKE KEM identifier of the suite: DHKEM(X25519, HKDF-SHA256).
const KEMID = 0x0020

var (
	kem  = hpke.DHKEM(ecdh.X25519())
	kdf  = hpke.HKDFSHA256()
	aead = hpke.ChaCha20Poly1305()
)

// refPattern is what a secret's name (a ref) may be.
var refPattern = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,62}$`)

// MaxRefs is the most secretRefs one command may carry.
const MaxRefs = 16

// ErrBadRef is wrapped by ValidRef's error.
var ErrBadRef = errors.New("invalid secret ref")

// ValidRef checks a ref's spelling.
func ValidRef(ref string) error {
	if !refPattern.MatchString(ref) {
		return fmt.Errorf("%w %q: lower-case letters, digits, '.', '_' and '-', at most 63, starting with a letter or digit", ErrBadRef, ref)
	}
	return nil
}

// ValidRefs checks a command's refs: each spelled right, none twice, at
// most MaxRefs.
func ValidRefs(refs []string) error {
	if len(refs) > MaxRefs {
		return fmt.Errorf("%w: %d refs, at most %d", ErrBadRef, len(refs), MaxRefs)
	}
	seen := map[string]bool{}
	for _, r := range refs {
		if err := ValidRef(r); err != nil {
			return err
		}
		if seen[r] {
			return fmt.Errorf("%w %q: named twice", ErrBadRef, r)
		}
		seen[r] = true
	}
	return nil
}

// Info is the HPKE info string of one sealed value.
func Info(nodeID, commandID, ref string) []byte {
	return []byte("bc-secret-ref-v1\nnode=" + nodeID + "\ncommand=" + commandID + "\nref=" + ref + "\n")
}

// Key is a one-time recipient key pair.
type Key struct{ priv hpke.PrivateKey }

// NewKey makes a one-time key pair.
func NewKey() (*Key, error) {
	k, err := kem.GenerateKey()
	if err != nil {
		return nil, fmt.Errorf("making a one-time key: %w", err)
	}
	return &Key{priv: k}, nil
}

// PublicKey is the key's public half, as it travels.
func (k *Key) PublicKey() []byte { return k.priv.PublicKey().Bytes() }

// Open opens a value sealed to k for (node, command, ref).
func (k *Key) Open(nodeID, commandID, ref string, sealed []byte) ([]byte, error) {
	v, err := hpke.Open(k.priv, kdf, aead, Info(nodeID, commandID, ref), sealed)
	if err != nil {
		return nil, fmt.Errorf("opening secret %q of %s: %w", ref, commandID, err)
	}
	return v, nil
}

// Seal seals value to the public key pub (as PublicKey returned it) for
// (node, command, ref).
func Seal(kemID uint32, pub []byte, nodeID, commandID, ref string, value []byte) ([]byte, error) {
	if kemID != KEMID {
		return nil, fmt.Errorf("HPKE KEM 0x%04x: only 0x%04x (DHKEM(X25519, HKDF-SHA256)) is supported", kemID, KEMID)
	}
	pk, err := kem.NewPublicKey(pub)
	if err != nil {
		return nil, fmt.Errorf("the one-time public key: %w", err)
	}
	for _, s := range []string{nodeID, commandID, ref} {
		if s == "" || strings.ContainsAny(s, "\n\r") {
			return nil, fmt.Errorf("sealing: %q cannot be bound", s)
		}
	}
	out, err := hpke.Seal(pk, kdf, aead, Info(nodeID, commandID, ref), value)
	if err != nil {
		return nil, fmt.Errorf("sealing secret %q: %w", ref, err)
	}
	return out, nil
}

// Wipe overwrites b: a value is cleared once its run is over. (The Go
// runtime may have copied it; this is hygiene, not a guarantee.)
func Wipe(b []byte) {
	for i := range b {
		b[i] = 0
	}
}
