package queue

import (
	"context"
	"errors"
	"fmt"

	"github.com/better-compute/commands/controlplane/commands/events"
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
	if h := q.hook(); h != nil && cmd.State == Cancelled {
		if err := h(ctx, tx, []Command{cmd}); err != nil {
			return Command{}, fmt.Errorf("recording what cancelling %s wakes: %w", commandID, err)
		}
	}
	return cmd, nil
}

// deleteNodeSQL marks the node deleted and cancels its open commands, pending
// and in flight, with reason node-deleted, each publishing command.settled,
// and announces the deletion on NodeDeletedChannel (delivered at commit), in
// one statement.
var deleteNodeSQL = `
WITH n AS (
  UPDATE nodes SET deleted_at = now() WHERE id = $1 AND deleted_at IS NULL RETURNING id
), u AS (
  UPDATE commands c SET state = 'cancelled', reason = '` + ReasonNodeDeleted + `',
    settled_at = now(), updated_at = now()
  FROM n
  WHERE c.node_id = n.id AND c.state IN ('pending', 'dispatched', 'acked', 'running')
  RETURNING c.id, c.tenant_id, c.node_id, c.kind, c.state, c.reason
), ev AS (` + settledEventSQL + `)
SELECT (SELECT count(*) FROM n), (SELECT count(*) FROM u),
  (SELECT count(pg_notify('` + NodeDeletedChannel + `', id)) FROM n)`

// DeleteNode marks the node deleted in tx and cancels its open commands with
// reason node-deleted, returning how many. In-flight commands are cancelled
// too, not left to the sweeper: a deleted node's certificate no longer opens
// a session, so none of them would ever report, and their owners would wait
// out not_after plus the kind's timeout for a failure that says less. The
// node's gateways hear of it on NodeDeletedChannel and close its sessions.
// An unknown or already deleted node is NOT_FOUND.
func (q *Queue) DeleteNode(ctx context.Context, tx pgx.Tx, nodeID string) (cancelled int64, err error) {
	var nodes, notified int64
	if err := tx.QueryRow(ctx, deleteNodeSQL, nodeID).Scan(&nodes, &cancelled, &notified); err != nil {
		return 0, fmt.Errorf("deleting node %s: %w", nodeID, err)
	}
	if nodes == 0 {
		return 0, nodeNotFound(nodeID)
	}
	if h := q.hook(); h != nil && cancelled > 0 {
		// now() is the transaction's start, so settled_at = now() finds
		// exactly the commands this deletion settled.
		rows, err := tx.Query(ctx, `SELECT `+commandColumns("c")+` FROM commands c
			WHERE c.node_id = $1 AND c.reason = '`+ReasonNodeDeleted+`' AND c.settled_at = now()`, nodeID)
		if err != nil {
			return 0, fmt.Errorf("reading what deleting node %s settled: %w", nodeID, err)
		}
		settled, err := scanCommands(rows)
		if err != nil {
			return 0, fmt.Errorf("reading what deleting node %s settled: %w", nodeID, err)
		}
		if err := h(ctx, tx, settled); err != nil {
			return 0, fmt.Errorf("recording what deleting node %s wakes: %w", nodeID, err)
		}
	}
	q.logger.Debug("node deleted", "node_id", nodeID, "cancelled", cancelled)
	return cancelled, nil
}

// DeletedNodes returns those of nodeIDs that are deleted, for a gateway
// that may have missed NodeDeletedChannel while its listener was away.
func (q *Queue) DeletedNodes(ctx context.Context, db DBTX, nodeIDs []string) ([]string, error) {
	rows, err := db.Query(ctx, `SELECT id FROM nodes WHERE id = ANY($1) AND deleted_at IS NOT NULL ORDER BY id`, nodeIDs)
	if err != nil {
		return nil, fmt.Errorf("reading deleted nodes: %w", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("reading deleted nodes: %w", err)
	}
	return out, nil
}
