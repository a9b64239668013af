package batches

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/better-compute/commands/controlplane/internal/errcode"
	"github.com/better-compute/commands/controlplane/internal/store"
	"github.com/better-compute/commands/internal/trust"
)

// CheckScope says whether a command of kind on node with payload may run in
// the batch: the batch is the tenant's, before its deadline, and a leaf
// holds (node, kind) — bound to this payload when the leaf binds one. It
// returns whether the command must wait for approvals.
func CheckScope(ctx context.Context, db store.DBTX, tenantID, batchID, nodeID, kind string, payload []byte, now time.Time) (awaiting bool, err error) {
	b, _, _, err := scopeLeaf(ctx, db, tenantID, batchID, nodeID, kind, payload, now)
	if err != nil {
		return false, err
	}
	return b.State == StateAwaiting, nil
}

// CheckRun is CheckScope for a new command (commands.run), which must also
// find its leaf free: the node runs one command per leaf and refuses any
// other with BATCH_UNAPPROVED ("leaf 0 of batch … ran cmd_…"), so a second
// command on a leaf is refused here, at once, with INVALID_STATE naming the
// leaf and the command that holds it. A retry with idempotencyKey (the
// stored form, queue.APIKey) finds its own command, which does not count.
//
// A leaf is held by every command of the batch on it except one that
// consumed nothing on the node: settled without ever being dispatched
// (cancelled or expired while pending), or rejected by the node's checks
// (a leaf is consumed only by a command the node accepted). Two concurrent
// runs on one leaf in separate transactions can both pass; the node still
// runs only one of them.
func CheckRun(ctx context.Context, db store.DBTX, tenantID, batchID, nodeID, kind string, payload []byte, idempotencyKey string, now time.Time) (awaiting bool, err error) {
	b, tree, index, err := scopeLeaf(ctx, db, tenantID, batchID, nodeID, kind, payload, now)
	if err != nil {
		return false, err
	}
	rows, err := db.Query(ctx, `SELECT id, payload::text, state FROM commands
WHERE node_id = $1 AND batch_id = $2 AND kind = $3
  AND state <> 'rejected' AND NOT (bc_state_terminal(state) AND attempts = 0)
  AND ($4 = '' OR idempotency_key IS DISTINCT FROM $4)
ORDER BY seq`, nodeID, batchID, kind, idempotencyKey)
	if err != nil {
		return false, fmt.Errorf("reading the commands of batch %s: %w", batchID, err)
	}
	defer rows.Close()
	for rows.Next() {
		var id, p, state string
		if err := rows.Scan(&id, &p, &state); err != nil {
			return false, fmt.Errorf("reading the commands of batch %s: %w", batchID, err)
		}
		if i, ok := tree.Index(nodeID, kind, trust.PayloadDigest([]byte(p))); !ok || i != index {
			continue
		}
		return false, &errcode.Error{Code: errcode.InvalidState, Reason: "batch-leaf-used",
			Message: fmt.Sprintf("batch %s's leaf %d (%s, %s) already has command %s (%s): a leaf runs one command, and the node would refuse this one (BATCH_UNAPPROVED); create another batch for it",
				batchID, index, nodeID, kind, id, state),
			Details: map[string]string{"batchId": batchID, "leafIndex": strconv.FormatUint(index, 10), "subject": nodeID, "kind": kind, "commandId": id}}
	}
	if err := rows.Err(); err != nil {
		return false, fmt.Errorf("reading the commands of batch %s: %w", batchID, err)
	}
	return b.State == StateAwaiting, nil
}

// scopeLeaf finds the batch and the leaf a command of kind on node with
// payload takes in it, with the refusals CheckScope documents.
func scopeLeaf(ctx context.Context, db store.DBTX, tenantID, batchID, nodeID, kind string, payload []byte, now time.Time) (Batch, *trust.Tree, uint64, error) {
	b, err := Get(ctx, db, tenantID, batchID)
	if err != nil {
		if errors.Is(err, errcode.ErrNotFound) {
			return b, nil, 0, &errcode.Error{Code: errcode.InvalidInput, Reason: "batch-not-found", Message: "batch " + batchID + " does not exist in this tenant: create it first (commandBatches.create)",
				Details: map[string]string{"field": "batchId", "batchId": batchID}}
		}
		return b, nil, 0, err
	}
	if b.State == StateExpired || !now.Before(b.Deadline) {
		return b, nil, 0, &errcode.Error{Code: errcode.InvalidState, Reason: "batch-expired", Message: "batch " + batchID + " passed its deadline", Details: map[string]string{"batchId": batchID}}
	}
	leaves, err := trustLeaves(b.Scope)
	if err != nil {
		return b, nil, 0, err
	}
	tree, err := trust.NewTree(leaves)
	if err != nil {
		return b, nil, 0, err
	}
	i, ok := tree.Index(nodeID, kind, trust.PayloadDigest(payload))
	if !ok {
		return b, nil, 0, &errcode.Error{Code: errcode.InvalidInput, Reason: "not-in-batch-scope",
			Message: fmt.Sprintf("batch %s's scope holds no leaf for (%s, %s) with this payload: the batch must name the node and kind (and the payload's SHA-256 when it binds one)", batchID, nodeID, kind),
			Details: map[string]string{"field": "batchId", "batchId": batchID, "subject": nodeID, "kind": kind}}
	}
	return b, tree, i, nil
}
