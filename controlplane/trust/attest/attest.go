// Package attest is the Go verifier of attested results for consumers in
// the control plane (the metal module's nodeSignedResults() for wipes and
// diagnostics, a workflow that acts on a diag.dcgm verdict): before any
// state transition that depends on a result, check that the node signed
// exactly this result, for exactly this command, with a certificate the
// node CA issued to it (node_certs). A forged or altered result is refused.
package attest

import (
	"context"
	"crypto/x509"
	"fmt"

	"github.com/better-compute/commands/controlplane/commands/queue"
	"github.com/better-compute/commands/controlplane/internal/store"
	"github.com/better-compute/commands/controlplane/trust/nodecerts"
	"github.com/better-compute/commands/internal/trust"
)

// Result is what an attestation covers (trust.AttestedResult).
type Result = trust.AttestedResult

// FromCommand is the Result of a stored command.
func FromCommand(c queue.Command) Result {
	r := Result{CommandID: c.ID, NodeID: c.NodeID, State: string(c.State), CommandBytes: c.CommandBytes,
		ResultBytes: c.ResultBytes, ResultSHA256: c.ResultSHA256, NodeSig: c.NodeSig, ReportedAt: c.UpdatedAt}
	if c.SettledAt != nil {
		r.ReportedAt = *c.SettledAt
	}
	return r
}

// Records are the node certificates as trust's verifier reads them.
func Records(certs []nodecerts.Cert) []trust.NodeCertRecord {
	out := make([]trust.NodeCertRecord, 0, len(certs))
	for _, c := range certs {
		out = append(out, trust.NodeCertRecord{Serial: c.Serial, PEM: c.PEM, RevokedAt: c.RevokedAt})
	}
	return out
}

// NodeSignedResults loads the nodes' certificates and verifies each result
// (what the metal module calls before acting on wipes and diagnostics). A
// result that does not verify is an error naming the command.
func NodeSignedResults(ctx context.Context, db store.DBTX, nodeCA *x509.CertPool, results ...Result) error {
	certsOf := map[string][]trust.NodeCertRecord{}
	for _, r := range results {
		certs, ok := certsOf[r.NodeID]
		if !ok {
			list, err := nodecerts.List(ctx, db, r.NodeID)
			if err != nil {
				return err
			}
			certs = Records(list)
			certsOf[r.NodeID] = certs
		}
		if _, err := trust.VerifyAttested(r, nodeCA, certs); err != nil {
			return fmt.Errorf("result of %s on %s: %w", r.CommandID, r.NodeID, err)
		}
	}
	return nil
}
