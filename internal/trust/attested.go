package trust

import (
	"crypto/sha256"
	"crypto/x509"
	"errors"
	"fmt"
	"time"
)

// AttestedResult is what a node's attestation covers, as a consumer (the
// control plane's verifier, `better-compute commands verify`) holds it.
type AttestedResult struct {
	CommandID    string
	NodeID       string
	State        string
	CommandBytes []byte // the command's stored, signed bytes
	ResultBytes  []byte // the result exactly as the node sent it
	ResultSHA256 []byte // what the node reported
	NodeSig      []byte
	// ReportedAt is when the result was stored: the time the node's
	// certificate must cover.
	ReportedAt time.Time
}

// NodeCertRecord is one certificate the node CA issued to a node, as the
// control plane records it.
type NodeCertRecord struct {
	Serial    string
	PEM       []byte
	RevokedAt *time.Time
}

// Errors of VerifyAttested besides the signature's.
var (
	ErrResultAltered = errors.New("the result is not the one the node reported: its SHA-256 differs")
	ErrNoCommand     = errors.New("the command's signed bytes are not known: nothing binds the result to it")
)

// VerifyAttested checks r against the node's certificates: any the node CA
// issued to r's node that covers ReportedAt (superseded ones included,
// since a result may outlive the certificate that signed it; one revoked
// before ReportedAt not). It returns the serial that verified.
func VerifyAttested(r AttestedResult, nodeCA *x509.CertPool, certs []NodeCertRecord) (string, error) {
	if len(r.CommandBytes) == 0 {
		return "", ErrNoCommand
	}
	return VerifyAttestedDigest(r, CommandDigest(r.CommandBytes), nodeCA, certs)
}

// VerifyAttestedDigest is VerifyAttested with the command's digest given
// (the API shows it as commandSha256) instead of its bytes.
func VerifyAttestedDigest(r AttestedResult, commandDigest [32]byte, nodeCA *x509.CertPool, certs []NodeCertRecord) (string, error) {
	if len(r.NodeSig) == 0 {
		return "", ErrNoAttestation
	}
	sum := sha256.Sum256(r.ResultBytes)
	if len(r.ResultSHA256) != 0 && string(sum[:]) != string(r.ResultSHA256) {
		return "", ErrResultAltered
	}
	st := ResultStatement{CommandID: r.CommandID, CommandDigest: commandDigest, NodeID: r.NodeID, State: r.State, ResultSHA256: sum[:]}
	var last error = fmt.Errorf("node %s has no recorded certificate", r.NodeID)
	for _, c := range certs {
		if c.RevokedAt != nil && !c.RevokedAt.After(r.ReportedAt) {
			last = fmt.Errorf("certificate %s was revoked before the result was reported", c.Serial)
			continue
		}
		cert, err := ParseCertPEM(c.PEM)
		if err != nil {
			last = fmt.Errorf("certificate %s: %w", c.Serial, err)
			continue
		}
		if err := VerifyResult(nodeCA, cert, st, r.NodeSig, r.ReportedAt); err != nil {
			last = fmt.Errorf("certificate %s: %w", c.Serial, err)
			continue
		}
		return c.Serial, nil
	}
	return "", last
}
