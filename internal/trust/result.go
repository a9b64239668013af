package trust

import (
	"crypto"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"
)

// ResultStatement is what a node signs for an attested kind's outcome: the
// command it answers (by id and by the digest of the signed command bytes,
// so a result cannot be moved to another command), the node, the terminal
// state and the SHA-256 of the result document.
type ResultStatement struct {
	CommandID     string
	CommandDigest [32]byte
	NodeID        string
	State         string
	ResultSHA256  []byte
}

// Bytes is the statement's one encoding: a fixed, line-based text that the
// verifier rebuilds from the stored row, so there is nothing to re-marshal.
// Each field is checked not to hold a line break.
func (s ResultStatement) Bytes() ([]byte, error) {
	for name, v := range map[string]string{"command id": s.CommandID, "node id": s.NodeID, "state": s.State} {
		if v == "" || strings.ContainsAny(v, "\r\n") {
			return nil, fmt.Errorf("%w: result statement %s %q", ErrMalformed, name, v)
		}
	}
	if len(s.ResultSHA256) != 0 && len(s.ResultSHA256) != 32 {
		return nil, fmt.Errorf("%w: result sha256 of %d bytes", ErrMalformed, len(s.ResultSHA256))
	}
	var b strings.Builder
	b.WriteString("bc-command-update-v1\n")
	fmt.Fprintf(&b, "command=%s\n", s.CommandID)
	fmt.Fprintf(&b, "command-sha256=%s\n", hex.EncodeToString(s.CommandDigest[:]))
	fmt.Fprintf(&b, "node=%s\n", s.NodeID)
	fmt.Fprintf(&b, "state=%s\n", s.State)
	fmt.Fprintf(&b, "result-sha256=%s\n", hex.EncodeToString(s.ResultSHA256))
	return []byte(b.String()), nil
}

// SignResult signs the statement with the node's key (purpose
// command-update).
func SignResult(key crypto.Signer, s ResultStatement) ([]byte, error) {
	body, err := s.Bytes()
	if err != nil {
		return nil, err
	}
	return SignWith(key, PurposeCommandUpdate, body)
}

// ErrNoAttestation is returned for a result without a node signature.
var ErrNoAttestation = errors.New("the result carries no node signature")

// VerifyResult checks sig over the statement against a node certificate
// that nodeCA issued and that names the statement's node; at is when the
// result was reported (ingestion), the time the certificate must cover.
func VerifyResult(nodeCA *x509.CertPool, cert *x509.Certificate, s ResultStatement, sig []byte, at time.Time) error {
	if len(sig) == 0 {
		return ErrNoAttestation
	}
	if _, err := cert.Verify(x509.VerifyOptions{Roots: nodeCA, CurrentTime: at, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		return fmt.Errorf("node certificate %s: %w", cert.SerialNumber, err)
	}
	id, err := IdentityOf(cert)
	if err != nil {
		return err
	}
	if id.NodeID != s.NodeID {
		return fmt.Errorf("%w: certificate names node %q, the result %q", ErrBadSignature, id.NodeID, s.NodeID)
	}
	body, err := s.Bytes()
	if err != nil {
		return err
	}
	if err := VerifyWith(cert.PublicKey, PurposeCommandUpdate, body, sig); err != nil {
		return fmt.Errorf("result of %s: %w", s.CommandID, err)
	}
	return nil
}
