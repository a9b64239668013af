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

	"github.com/better-compute/commands/controlplane/store"
	"github.com/better-compute/commands/sdk/nodespec"
)

// Generation is one stored spec.
type Generation struct {
	NodeID     string
	Generation int64
	Spec       json.RawMessage
	Signature  []byte
}

// Set validates spec and stores it as the node's next generation.
func Set(ctx context.Context, db store.DBTX, nodeID string, spec json.RawMessage) (Generation, error) {
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
	return g, nil
}

// Latest returns the newest generation, or a zero Generation when none.
func Latest(ctx context.Context, db store.DBTX, nodeID string) (Generation, error) {
	g := Generation{NodeID: nodeID}
	var spec string
	err := db.QueryRow(ctx, `SELECT generation, spec::text, signature FROM node_specs WHERE node_id = $1 ORDER BY generation DESC LIMIT 1`, nodeID).
		Scan(&g.Generation, &spec, &g.Signature)
	if errors.Is(err, pgx.ErrNoRows) {
		return Generation{NodeID: nodeID}, nil
	}
	if err != nil {
		return Generation{}, fmt.Errorf("reading spec of %s: %w", nodeID, err)
	}
	g.Spec = json.RawMessage(spec)
	return g, nil
}
