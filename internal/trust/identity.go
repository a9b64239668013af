// Package trust holds what both sides of a node's session read and verify:
// the node certificate's identity format today and, as signing lands, keys,
// signed envelopes and trust bundles. bcd and the control plane both import
// it; it imports neither, so the node daemon never depends on a control plane
// package for a format both sides must agree on. The node CA that issues
// certificates stays in controlplane/trust/pki.
package trust

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"sort"
	"strings"
)

// Identity is what a node certificate says about its node.
type Identity struct {
	NodeID string
	Role   string
	// AllowedKinds is empty for a full identity and lists the kinds a
	// restricted identity (a discovery ramdisk, say) may run.
	AllowedKinds []string
}

// Restricted reports whether the identity only accepts some kinds.
func (id Identity) Restricted() bool { return len(id.AllowedKinds) > 0 }

// Allows reports whether the identity accepts kind.
func (id Identity) Allows(kind string) bool {
	return !id.Restricted() || slices.Contains(id.AllowedKinds, kind)
}

// The URI SANs that carry an identity.
const (
	uriNode    = "urn:bc:node:"
	uriRole    = "urn:bc:role:"
	uriAllowed = "urn:bc:allowed-kinds:"
)

// DefaultRole is the role of a certificate that names none.
const DefaultRole = "node"

// ErrNotNodeCert is returned for a certificate that names no node.
var ErrNotNodeCert = errors.New("certificate names no node")

// IdentityOf reads a node identity from a verified certificate.
func IdentityOf(cert *x509.Certificate) (Identity, error) {
	var id Identity
	for _, u := range cert.URIs {
		s := u.String()
		switch {
		case strings.HasPrefix(s, uriNode):
			id.NodeID = strings.TrimPrefix(s, uriNode)
		case strings.HasPrefix(s, uriRole):
			id.Role = strings.TrimPrefix(s, uriRole)
		case strings.HasPrefix(s, uriAllowed):
			if v := strings.TrimPrefix(s, uriAllowed); v != "" {
				id.AllowedKinds = strings.Split(v, ",")
			}
		}
	}
	if id.NodeID == "" {
		return Identity{}, ErrNotNodeCert
	}
	if id.Role == "" {
		id.Role = DefaultRole
	}
	return id, nil
}

// IdentityURIs is the URI SANs that carry id in a node certificate, the
// inverse of IdentityOf. Allowed kinds are sorted, so one identity always
// makes the same certificate fields.
func IdentityURIs(id Identity) ([]*url.URL, error) {
	if id.NodeID == "" {
		return nil, errors.New("identity: node id is required")
	}
	role := id.Role
	if role == "" {
		role = DefaultRole
	}
	raw := []string{uriNode + id.NodeID, uriRole + role}
	if len(id.AllowedKinds) > 0 {
		kinds := append([]string(nil), id.AllowedKinds...)
		sort.Strings(kinds)
		raw = append(raw, uriAllowed+strings.Join(kinds, ","))
	}
	out := make([]*url.URL, 0, len(raw))
	for _, r := range raw {
		u, err := url.Parse(r)
		if err != nil {
			return nil, fmt.Errorf("identity uri %q: %w", r, err)
		}
		out = append(out, u)
	}
	return out, nil
}

// ParseCertPEM parses the first certificate in b.
func ParseCertPEM(b []byte) (*x509.Certificate, error) {
	blk, _ := pem.Decode(b)
	if blk == nil || blk.Type != "CERTIFICATE" {
		return nil, errors.New("not a PEM CERTIFICATE")
	}
	return x509.ParseCertificate(blk.Bytes)
}

// NewKeyAndCSR makes a node key and a CSR for it (PEM), as bcd does at join.
func NewKeyAndCSR(nodeName string) (keyPEM, csrPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("generating node key: %w", err)
	}
	csrDER, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: pkix.Name{CommonName: nodeName}}, key)
	if err != nil {
		return nil, nil, fmt.Errorf("creating csr: %w", err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, fmt.Errorf("encoding node key: %w", err)
	}
	return PEMBlock("PRIVATE KEY", keyDER), PEMBlock("CERTIFICATE REQUEST", csrDER), nil
}

// PEMBlock encodes der as one PEM block of type typ.
func PEMBlock(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}
