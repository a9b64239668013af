package queue

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// Signed is what a node's secret exchange reads of one of its commands:
// its tenant, its state and the signed bytes the node received.
type Signed struct {
	TenantID string
	State    State
	Bytes    []byte
}

// SignedOf returns the tenant, state and signed bytes of command commandID
// of node nodeID; a command the node does not have is NOT_FOUND.
func SignedOf(ctx context.Context, db DBTX, nodeID, commandID string) (Signed, error) {
	var s Signed
	err := db.QueryRow(ctx, `SELECT tenant_id, state, command_bytes FROM commands WHERE id = $1 AND node_id = $2`, commandID, nodeID).
		Scan(&s.TenantID, &s.State, &s.Bytes)
	if errors.Is(err, pgx.ErrNoRows) {
		return Signed{}, commandNotFound(nodeID, commandID)
	}
	if err != nil {
		return Signed{}, fmt.Errorf("reading command %s: %w", commandID, err)
	}
	return s, nil
}
