package trust

import (
	"crypto"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
)

// NewEd25519 makes an Ed25519 key pair (roots, worker keys, approvers).
func NewEd25519() (ed25519.PublicKey, ed25519.PrivateKey, error) {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("generating an ed25519 key: %w", err)
	}
	return pub, priv, nil
}

// MarshalPrivateKeyPEM encodes a private key as PKCS#8 PEM ("PRIVATE KEY").
func MarshalPrivateKeyPEM(key crypto.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("encoding private key: %w", err)
	}
	return PEMBlock("PRIVATE KEY", der), nil
}

// MarshalPublicKeyPEM encodes a public key as PKIX PEM ("PUBLIC KEY").
func MarshalPublicKeyPEM(pub crypto.PublicKey) ([]byte, error) {
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return nil, fmt.Errorf("encoding public key: %w", err)
	}
	return PEMBlock("PUBLIC KEY", der), nil
}

// ParseEd25519PrivateKeyPEM reads a PKCS#8 PEM Ed25519 private key.
func ParseEd25519PrivateKeyPEM(b []byte) (ed25519.PrivateKey, error) {
	blk, _ := pem.Decode(b)
	if blk == nil || blk.Type != "PRIVATE KEY" {
		return nil, errors.New("not a PEM PRIVATE KEY (PKCS#8)")
	}
	k, err := x509.ParsePKCS8PrivateKey(blk.Bytes)
	if err != nil {
		return nil, fmt.Errorf("parsing PKCS#8 private key: %w", err)
	}
	ed, ok := k.(ed25519.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("private key is %T, want Ed25519", k)
	}
	return ed, nil
}

// ParseEd25519PublicKeyPEM reads a PKIX PEM Ed25519 public key.
func ParseEd25519PublicKeyPEM(b []byte) (ed25519.PublicKey, error) {
	blk, _ := pem.Decode(b)
	if blk == nil || blk.Type != "PUBLIC KEY" {
		return nil, errors.New("not a PEM PUBLIC KEY")
	}
	k, err := x509.ParsePKIXPublicKey(blk.Bytes)
	if err != nil {
		return nil, fmt.Errorf("parsing public key: %w", err)
	}
	ed, ok := k.(ed25519.PublicKey)
	if !ok {
		return nil, fmt.Errorf("public key is %T, want Ed25519", k)
	}
	return ed, nil
}

// LoadEd25519PrivateKey reads a PEM private key file.
func LoadEd25519PrivateKey(path string) (ed25519.PrivateKey, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading key: %w", err)
	}
	k, err := ParseEd25519PrivateKeyPEM(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return k, nil
}

// LoadEd25519PublicKey reads a PEM public key file; a private key file is
// read for its public half.
func LoadEd25519PublicKey(path string) (ed25519.PublicKey, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading key: %w", err)
	}
	if k, err := ParseEd25519PublicKeyPEM(b); err == nil {
		return k, nil
	}
	priv, err := ParseEd25519PrivateKeyPEM(b)
	if err != nil {
		return nil, fmt.Errorf("%s: neither a PEM PUBLIC KEY nor a PRIVATE KEY: %w", path, err)
	}
	return priv.Public().(ed25519.PublicKey), nil
}
