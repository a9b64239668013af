package queue

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/better-compute/commands/controlplane/internal/errcode"
)

// transitionSQL is one guarded UPDATE: it lands only when the new state ranks
// above the current one (bc_state_rank), so reports that skip steps land and
// a late one after a terminal state changes nothing, whatever Go does. With
// an epoch it also requires the node's current session to be that epoch. A
// terminal landing publishes command.settled in the same statement.
var transitionSQL = transitionCTE + `
SELECT * FROM u`

// transitionCTE is the guarded UPDATE (u) and its settled event (ev) that
// transitionSQL selects from (TransitionSet has its own, over arrays).
var transitionCTE = `
WITH u AS (
  UPDATE commands c SET
    state = $2,
    reason = CASE WHEN $3 <> '' THEN $3 ELSE c.reason END,
    message = CASE WHEN $11 <> '' THEN $11
      WHEN bc_state_terminal($2) AND c.message = '' AND c.waiting_message <> '' THEN 'it waited: ' || c.waiting_message
      ELSE c.message END,
    waiting_reason = CASE WHEN bc_state_terminal($2) THEN c.waiting_reason ELSE '' END,
    waiting_message = CASE WHEN bc_state_terminal($2) THEN c.waiting_message ELSE '' END,
    waiting_detail = CASE WHEN bc_state_terminal($2) THEN c.waiting_detail END,
    kind_version = CASE WHEN $2 = 'dispatched' AND $13 <> '' THEN $13 ELSE c.kind_version END,
    result_bytes = coalesce($12, c.result_bytes),
    result = coalesce($4::jsonb, c.result),
    result_sha256 = coalesce($5, c.result_sha256),
    node_sig = coalesce($6, c.node_sig),
    rebooted = c.rebooted OR $7,
    progress = coalesce($9::jsonb, c.progress),
    settled_at = CASE WHEN bc_state_terminal($2) THEN now() END,
    dispatched_epoch = CASE WHEN $2 = 'dispatched' THEN $8 ELSE c.dispatched_epoch END,
    attempts = CASE WHEN $2 = 'dispatched' THEN c.attempts + 1 ELSE c.attempts END,
    next_attempt_at = NULL,
    updated_at = now()
  WHERE c.id = $1 AND ($10 = '' OR c.node_id = $10)
    AND bc_state_rank(c.state) < bc_state_rank($2)
    AND ($8 = 0 OR EXISTS (SELECT 1 FROM nodes n WHERE n.id = c.node_id AND n.session_epoch = $8))
  RETURNING ` + commandColumns("c") + `
), ev AS (` + settledEventSQL + ` WHERE bc_state_terminal(state))
`

// Transition applies a state report. It changes the command only when t.To
// ranks above the current state (a late running after succeeded changes
// nothing) and, with t.Epoch set, only while that session is the node's
// current one; changed says whether it landed, and the command returned is
// the current row either way. With t.NodeID set, a command of another node
// is NOT_FOUND. A terminal landing publishes command.settled
// (commandId, nodeId, kind, state, reason) exactly once. Moving to pending is
// not a transition: use Requeue.
func (q *Queue) Transition(ctx context.Context, db DBTX, t Transition) (Command, bool, error) {
	if !t.To.Terminal() || q.hook() == nil {
		return q.transition(ctx, db, t)
	}
	var (
		cmd     Command
		changed bool
	)
	err := q.settling(ctx, db, func(db DBTX) ([]Command, error) {
		var err error
		if cmd, changed, err = q.transition(ctx, db, t); err != nil || !changed {
			return nil, err
		}
		return []Command{cmd}, nil
	})
	if err != nil {
		return Command{}, false, err
	}
	return cmd, changed, nil
}

func (q *Queue) transition(ctx context.Context, db DBTX, t Transition) (Command, bool, error) {
	if !t.To.Valid() || t.To == Pending {
		return Command{}, false, errcode.Newf(errcode.InvalidInput, "invalid-state", map[string]string{"state": string(t.To)}, "cannot transition to state %q", t.To)
	}
	var result, progress any
	if t.Result != nil {
		result = string(t.Result)
	}
	if t.Progress != nil {
		progress = string(t.Progress)
	}
	cmd, err := scanCommand(db.QueryRow(ctx, transitionSQL,
		t.CommandID, string(t.To), t.Reason, result, t.ResultSHA256, t.NodeSig, t.Rebooted, t.Epoch, progress, t.NodeID, t.Message, t.ResultBytes, t.KindVersion))
	if errors.Is(err, pgx.ErrNoRows) {
		cur, gerr := q.Get(ctx, db, t.NodeID, t.CommandID)
		if gerr != nil {
			return Command{}, false, gerr
		}
		return cur, false, nil
	}
	if err != nil {
		return Command{}, false, fmt.Errorf("transitioning %s to %s: %w", t.CommandID, t.To, err)
	}
	if cmd.State.Terminal() {
		q.logger.Debug("command settled", "command_id", cmd.ID, "node_id", cmd.NodeID, "state", cmd.State, "reason", cmd.Reason)
	}
	return cmd, true, nil
}

// TransitionResult is what a transition in a set came to
// (TransitionSet): the command as it is now and whether the transition
// changed it, or Found false for a command that is not there (or not
// t.NodeID's).
type TransitionResult struct {
	Command Command
	Changed bool
	Found   bool
}

// Requeue puts a dispatched or acked command back to pending until
// now+backoff: the daemon answered BUSY (no credits). It is the one move
// towards pending, guarded like a transition (by epoch when non-zero, and,
// with nodeID set, to that node's commands: epochs count per node, so
// another node's session must not requeue this one's), and it never
// touches a running or terminal command.
func (q *Queue) Requeue(ctx context.Context, db DBTX, nodeID, commandID string, epoch int64, backoff time.Duration) (Command, bool, error) {
	cmd, err := scanCommand(db.QueryRow(ctx, `
		UPDATE commands c SET state = 'pending', next_attempt_at = now() + $2 * interval '1 microsecond', updated_at = now()
		WHERE c.id = $1 AND c.state IN ('dispatched', 'acked') AND ($4 = '' OR c.node_id = $4)
		  AND ($3 = 0 OR EXISTS (SELECT 1 FROM nodes n WHERE n.id = c.node_id AND n.session_epoch = $3))
		RETURNING `+commandColumns("c"), commandID, backoff.Microseconds(), epoch, nodeID))
	if errors.Is(err, pgx.ErrNoRows) {
		cur, gerr := q.Get(ctx, db, nodeID, commandID)
		if gerr != nil {
			return Command{}, false, gerr
		}
		return cur, false, nil
	}
	if err != nil {
		return Command{}, false, fmt.Errorf("requeueing %s: %w", commandID, err)
	}
	return cmd, true, nil
}

// RecordProgress stores a progress report of a command that is not yet
// terminal, without touching its state; with epoch set, only while that
// session is current. changed is false for a terminal or fenced command.
func (q *Queue) RecordProgress(ctx context.Context, db DBTX, commandID string, epoch int64, progress []byte) (bool, error) {
	tag, err := db.Exec(ctx, `UPDATE commands c SET progress = $2::text::jsonb, updated_at = now()
		WHERE c.id = $1 AND c.state IN ('pending', 'dispatched', 'acked', 'running')
		  AND ($3 = 0 OR EXISTS (SELECT 1 FROM nodes n WHERE n.id = c.node_id AND n.session_epoch = $3))`,
		commandID, string(progress), epoch)
	if err != nil {
		return false, fmt.Errorf("recording progress of %s: %w", commandID, err)
	}
	if tag.RowsAffected() == 0 {
		if _, err := q.Get(ctx, db, "", commandID); err != nil {
			return false, err
		}
		return false, nil
	}
	return true, nil
}
