package remediation

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/better-compute/commands/controlplane/commands/wakes"
)

// Wake is the module's waker: a settled command of remediation
// wf:<id>:… advances that remediation.
func (e *Engine) Wake(ctx context.Context, w wakes.Wake) error {
	id := strings.TrimPrefix(w.Owner, "wf:")
	if !strings.HasPrefix(id, e.owner+"-") {
		return fmt.Errorf("wake for %s is not one of %s's remediations", w.Owner, e.owner)
	}
	return e.Advance(ctx, id)
}

// AdvanceAll advances every open remediation of the engine's owner, each
// in its own transaction; rows another replica holds are skipped.
func (e *Engine) AdvanceAll(ctx context.Context) error {
	rows, err := e.mc.Pool().Query(ctx, `SELECT id FROM remediations WHERE owner = $1 AND state IN ('waiting', 'running', 'verifying') ORDER BY created_at, id`, e.owner)
	if err != nil {
		return fmt.Errorf("listing open remediations: %w", err)
	}
	list, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return fmt.Errorf("listing open remediations: %w", err)
	}
	var errs []error
	for _, id := range list {
		if err := e.Advance(ctx, id); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Advance takes remediation id one step further, in one transaction that
// holds its row (skipped when another replica holds it).
func (e *Engine) Advance(ctx context.Context, id string) error {
	return pgx.BeginFunc(ctx, e.mc.Pool(), func(tx pgx.Tx) error {
		r, err := scanRow(tx.QueryRow(ctx, `SELECT `+rowColumns+` FROM remediations WHERE id = $1 FOR UPDATE SKIP LOCKED`, id))
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("reading remediation %s: %w", id, err)
		}
		switch r.State {
		case StateWaiting:
			return e.start(ctx, tx, r)
		case StateRunning:
			return e.running(ctx, tx, r)
		case StateVerifying:
			return e.verifying(ctx, tx, r)
		}
		return nil
	})
}

func (e *Engine) setWaiting(ctx context.Context, tx pgx.Tx, r Row, reason, msg string) error {
	if r.WaitingReason == reason && r.WaitingMessage == msg {
		return nil
	}
	_, err := tx.Exec(ctx, `UPDATE remediations SET waiting_reason = $2, waiting_message = $3, updated_at = now() WHERE id = $1`, r.ID, reason, msg)
	if err != nil {
		return fmt.Errorf("remediation %s: %w", r.ID, err)
	}
	e.mc.Logger().Debug("remediation waits", "remediation_id", r.ID, "node_id", r.NodeID, "reason", reason, "message", msg)
	if reason == "" || reason == r.WaitingReason {
		return nil
	}
	// A new reason to wait is a decision: say it once.
	return e.mc.Event(ctx, tx, r.TenantID, TopicWaiting, map[string]any{"remediationId": r.ID, "nodeId": r.NodeID, "pool": r.Pool,
		"action": r.Action, "gpu": r.GPU, "reason": reason, "message": msg})
}
