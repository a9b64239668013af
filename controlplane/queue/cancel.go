package queue

import (
	"context"
	"errors"
	"fmt"

	"github.com/better-compute/commands/controlplane/events"
	"github.com/jackc/pgx/v5"
)

// cancelSQL cancels in one guarded UPDATE: a pending command becomes
// cancelled and settled at once; an in-flight one keeps its state and gets
// cancel_requested_at. The event goes out only on the first request for a
// command not yet terminal (prev IS NULL), so a repeated cancel publishes
// nothing new.
var cancelSQL = `
WITH prev AS (
  SELECT id, cancel_requested_at FROM commands
  WHERE id = $2 AND ($1 = '' OR node_id = $1)
    AND state IN ('pending', 'dispatched', 'acked', 'running')
  FOR UPDATE
), u AS (
  UPDATE commands c SET
    state = CASE WHEN c.state = 'pending' THEN 'cancelled' ELSE c.state END,
    reason = CASE WHEN c.state = 'pending' THEN '` + ReasonCancelled + `' ELSE c.reason END,
    settled_at = CASE WHEN c.state = 'pending' THEN now() ELSE c.settled_at END,
    cancel_requested_at = coalesce(c.cancel_requested_at, now()),
    updated_at = now()
  FROM prev
  WHERE c.id = prev.id AND c.state IN ('pending', 'dispatched', 'acked', 'running')
  RETURNING ` + commandColumns("c") + `, prev.cancel_requested_at IS NULL AS first
), ev AS (
  INSERT INTO outbox (tenant_id, topic, payload)
  SELECT tenant_id, '` + events.TopicCommandCancelRequested + `',
    jsonb_build_object('nodeId', node_id, 'commandId', id, 'kind', kind, 'state', state)
  FROM u WHERE first
), settled AS (` + settledEventSQL + ` WHERE state = 'cancelled')
SELECT * FROM u`

// Cancel cancels command commandID of node nodeID ("" accepts any node, for
// modules that hold only the command id) in tx. A pending command becomes
// cancelled at once (reason cancelled) and never runs; an in-flight one keeps
// its state and is marked cancel_requested_at, and the gateway sends Cancel;
// a terminal one comes back unchanged; an unknown one is NOT_FOUND. The first
// cancel of a command not yet terminal publishes node.command.cancel-requested
// (state cancelled for a pending one, the in-flight state otherwise); a
// pending one that it cancels also publishes command.settled.
func (q *Queue) Cancel(ctx context.Context, tx pgx.Tx, nodeID, commandID string) (Command, error) {
	var first bool
	cmd, err := scanCommand(tx.QueryRow(ctx, cancelSQL, nodeID, commandID), &first)
	if errors.Is(err, pgx.ErrNoRows) {
		// Terminal or unknown: return it unchanged or say NOT_FOUND.
		return q.Get(ctx, tx, nodeID, commandID)
	}
	if err != nil {
		return Command{}, fmt.Errorf("cancelling %s: %w", commandID, err)
	}
	return cmd, nil
}

// deleteNodeSQL marks the node deleted and cancels its pending commands with
// reason node-deleted, each publishing command.settled, in one statement.
var deleteNodeSQL = `
WITH n AS (
  UPDATE nodes SET deleted_at = now() WHERE id = $1 AND deleted_at IS NULL RETURNING id
), u AS (
  UPDATE commands c SET state = 'cancelled', reason = '` + ReasonNodeDeleted + `',
    settled_at = now(), updated_at = now()
  FROM n
  WHERE c.node_id = n.id AND c.state = 'pending'
  RETURNING c.id, c.tenant_id, c.node_id, c.kind, c.state, c.reason
), ev AS (` + settledEventSQL + `)
SELECT (SELECT count(*) FROM n), (SELECT count(*) FROM u)`

// DeleteNode marks the node deleted in tx and cancels its pending commands
// with reason node-deleted. In-flight commands are left to the sweeper, which
// fails them once their deadline passes. An unknown or already deleted node
// is NOT_FOUND.
func (q *Queue) DeleteNode(ctx context.Context, tx pgx.Tx, nodeID string) error {
	var nodes, cancelled int64
	if err := tx.QueryRow(ctx, deleteNodeSQL, nodeID).Scan(&nodes, &cancelled); err != nil {
		return fmt.Errorf("deleting node %s: %w", nodeID, err)
	}
	if nodes == 0 {
		return nodeNotFound(nodeID)
	}
	q.logger.Debug("node deleted", "node_id", nodeID, "cancelled", cancelled)
	return nil
}
