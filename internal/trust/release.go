package trust

import (
	"crypto/ed25519"
	"encoding/hex"
	"errors"
	"fmt"
	"time"
)

// Release is what a release key signs about one bcd release: its version
// and the exact package (size and SHA-256) a node may install as it. A
// release that may replace a newer version says so in AllowDowngrade, so a
// downgrade needs the release key's own word, not only the payload's.
type Release struct {
	// Version is the bcd version the package holds ("1.4.0").
	Version string `json:"version"`
	// SHA256 is the hex SHA-256 of the package file.
	SHA256 string `json:"sha256"`
	// Size is the package file's size in bytes.
	Size int64 `json:"size"`
	// AllowDowngrade signs this release for installing over a newer one.
	AllowDowngrade bool `json:"allowDowngrade,omitempty"`
	// IssuedAt is when it was signed.
	IssuedAt time.Time `json:"issuedAt"`
}

// ErrNoReleaseKey is wrapped when the trust bundle holds no release key:
// the node then refuses every upgrade.
var ErrNoReleaseKey = errors.New("the trust bundle holds no release key (pki.releaseKeys)")

// SignRelease signs r with each key given; at least one.
func SignRelease(r Release, keys ...ed25519.PrivateKey) ([]byte, error) {
	if len(keys) == 0 {
		return nil, errors.New("signing a release: no release key")
	}
	body, err := marshalJSON(r)
	if err != nil {
		return nil, err
	}
	s := Signed{Body: body}
	for _, k := range keys {
		s.Signatures = append(s.Signatures, Signature{KeyID: Ed25519KeyID(k.Public().(ed25519.PublicKey)), Sig: SignEd25519(k, PurposeRelease, body)})
	}
	return s.Encode(), nil
}

// DecodeRelease reads a signed release's wire form without verifying it,
// strictly: a version, a 64-hex-digit SHA-256 and a positive size.
func DecodeRelease(b []byte) (Release, Signed, error) {
	s, err := DecodeSigned(b)
	if err != nil {
		return Release{}, s, fmt.Errorf("release: %w", err)
	}
	var r Release
	if err := strictJSON(s.Body, &r); err != nil {
		return r, s, fmt.Errorf("%w: release body: %w", ErrMalformed, err)
	}
	if r.Version == "" {
		return r, s, fmt.Errorf("%w: release without a version", ErrMalformed)
	}
	if d, err := hex.DecodeString(r.SHA256); err != nil || len(d) != 32 {
		return r, s, fmt.Errorf("%w: release sha256 %q is not 64 hex digits", ErrMalformed, r.SHA256)
	}
	if r.Size <= 0 {
		return r, s, fmt.Errorf("%w: release size %d", ErrMalformed, r.Size)
	}
	return r, s, nil
}

// VerifyRelease checks that a release key of b, valid at now, signed the
// release in wire, and returns it. The caller compares it with the package
// it is about to install.
func VerifyRelease(b *Bundle, wire []byte, now time.Time) (Release, error) {
	r, s, err := DecodeRelease(wire)
	if err != nil {
		return r, err
	}
	if b == nil || len(b.ReleaseKeys) == 0 {
		return r, ErrNoReleaseKey
	}
	last := fmt.Errorf("%w: no signature by a release key of trust bundle version %d", ErrUnknownKey, b.Version)
	for _, sig := range s.Signatures {
		for _, k := range b.ReleaseKeys {
			if k.KeyID() != sig.KeyID {
				continue
			}
			if !k.Contains(now, DefaultClockSkew) {
				last = fmt.Errorf("release key %s: %w", short(sig.KeyID), ErrExpired)
				continue
			}
			if err := VerifyEd25519(k.PublicKey, PurposeRelease, s.Body, sig.Sig); err != nil {
				last = fmt.Errorf("release key %s: %w", short(sig.KeyID), err)
				continue
			}
			return r, nil
		}
	}
	return r, last
}
