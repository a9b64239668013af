// Package nodespecs stores each node's spec generations: only what commands
// need of desired state (GPU holds, passthrough instances, the reboot flag).
// A new generation wakes the node's session, which pushes it.
package nodespecs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/better-compute/commands/controlplane/internal/store"
	"github.com/better-compute/commands/internal/trust"
	"github.com/better-compute/commands/sdk/nodespec"
)

// Generation is one stored spec.
type Generation struct {
	NodeID     string
	Generation int64
	Spec       json.RawMessage
	// Signed, Signature and WorkerCert are the signed statement (node,
	// generation, spec), the worker key's signature over it (purpose
	// desired-state) and that key's certificate; nil while unsigned.
	Signed, Signature, WorkerCert []byte
}

// Signer signs a spec statement (controlplane/trust/signing implements it).
type Signer interface {
	Sign(p trust.Purpose, body []byte) (sig, cert []byte, err error)
}

// Set validates spec and stores it as the node's next generation, signed
// when signer is not nil: the statement names the node and the generation,
// so a spec cannot be replayed to another node or as another generation.
func Set(ctx context.Context, db store.DBTX, nodeID string, spec json.RawMessage, signer Signer) (Generation, error) {
	if _, err := nodespec.Parse(spec); err != nil {
		return Generation{}, err
	}
	g := Generation{NodeID: nodeID, Spec: spec}
	err := db.QueryRow(ctx, `
		INSERT INTO node_specs (node_id, generation, spec)
		SELECT $1, coalesce(max(generation), 0) + 1, $2::jsonb FROM node_specs WHERE node_id = $1
		RETURNING generation`, nodeID, string(spec)).Scan(&g.Generation)
	if err != nil {
		return Generation{}, fmt.Errorf("storing spec of %s: %w", nodeID, err)
	}
	if signer == nil {
		return g, nil
	}
	if g.Signed, err = (trust.SpecStatement{NodeID: nodeID, Generation: g.Generation, Spec: spec}).Encode(); err != nil {
		return Generation{}, err
	}
	if g.Signature, g.WorkerCert, err = signer.Sign(trust.PurposeDesiredState, g.Signed); err != nil {
		return Generation{}, fmt.Errorf("signing spec %d of %s: %w", g.Generation, nodeID, err)
	}
	if _, err := db.Exec(ctx, `UPDATE node_specs SET signed = $3, signature = $4, worker_cert = $5 WHERE node_id = $1 AND generation = $2`,
		nodeID, g.Generation, g.Signed, g.Signature, g.WorkerCert); err != nil {
		return Generation{}, fmt.Errorf("storing the signature of spec %d of %s: %w", g.Generation, nodeID, err)
	}
	return g, nil
}

// Latest returns the newest generation, or a zero Generation when none.
func Latest(ctx context.Context, db store.DBTX, nodeID string) (Generation, error) {
	g := Generation{NodeID: nodeID}
	var spec string
	err := db.QueryRow(ctx, `SELECT generation, spec::text, signed, signature, worker_cert FROM node_specs WHERE node_id = $1 ORDER BY generation DESC LIMIT 1`, nodeID).
		Scan(&g.Generation, &spec, &g.Signed, &g.Signature, &g.WorkerCert)
	if errors.Is(err, pgx.ErrNoRows) {
		return Generation{NodeID: nodeID}, nil
	}
	if err != nil {
		return Generation{}, fmt.Errorf("reading spec of %s: %w", nodeID, err)
	}
	g.Spec = json.RawMessage(spec)
	return g, nil
}
