package fleetruns

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/better-compute/commands/controlplane/commands/events"
	"github.com/better-compute/commands/controlplane/internal/errcode"
)

func invalidState(r Run, action string) error {
	return &errcode.Error{Code: errcode.InvalidState, Reason: "run-" + r.State,
		Message: fmt.Sprintf("fleet run %s is %s: it cannot be %s", r.ID, r.State, action),
		Details: map[string]string{"runId": r.ID, "state": r.State}}
}

// lockRun reads and locks a run of the tenant in tx.
func lockRun(ctx context.Context, tx pgx.Tx, tenantID, runID string) (Run, error) {
	r, err := scanRun(tx.QueryRow(ctx, `SELECT `+runColumns+` FROM fleet_runs WHERE id = $1 AND tenant_id = $2 FOR UPDATE`, runID, tenantID))
	if errors.Is(err, pgx.ErrNoRows) {
		return Run{}, NotFound(runID)
	}
	if err != nil {
		return Run{}, fmt.Errorf("locking run %s: %w", runID, err)
	}
	return r, nil
}

// Pause stops a running run from starting new commands; its open ones go
// on. A paused run comes back unchanged; a run that is stopping,
// cancelling or ended is INVALID_STATE.
func (s *Service) Pause(ctx context.Context, tenantID, runID, by string) (Run, error) {
	return s.control(ctx, tenantID, runID, func(tx pgx.Tx, r Run) error {
		switch r.State {
		case StatePaused:
			return nil
		case StateRunning:
		default:
			return invalidState(r, "paused")
		}
		if _, err := tx.Exec(ctx, `UPDATE fleet_runs SET state = 'paused', updated_at = now() WHERE id = $1`, r.ID); err != nil {
			return fmt.Errorf("pausing run %s: %w", r.ID, err)
		}
		return events.Write(ctx, tx, r.TenantID, TopicPaused, map[string]any{"runId": r.ID, "requester": r.Requester, "by": by})
	})
}

// Resume lets a paused run start commands again. A running run comes back
// unchanged; any other state is INVALID_STATE.
func (s *Service) Resume(ctx context.Context, tenantID, runID, by string) (Run, error) {
	return s.control(ctx, tenantID, runID, func(tx pgx.Tx, r Run) error {
		switch r.State {
		case StateRunning:
			return nil
		case StatePaused:
		default:
			return invalidState(r, "resumed")
		}
		if _, err := tx.Exec(ctx, `UPDATE fleet_runs SET state = 'running', waiting_reason = '', waiting_message = '', updated_at = now() WHERE id = $1`, r.ID); err != nil {
			return fmt.Errorf("resuming run %s: %w", r.ID, err)
		}
		return events.Write(ctx, tx, r.TenantID, TopicResumed, map[string]any{"runId": r.ID, "requester": r.Requester, "by": by})
	})
}

// Cancel ends a run as commands.cancel ends a command: nothing new starts
// (waiting targets become not-started, reason cancelled), pending commands
// are cancelled at once, and in-flight ones get a cancel request; the run
// is cancelling until they settle, then cancelled. A run already ended, or
// already cancelling, comes back unchanged.
func (s *Service) Cancel(ctx context.Context, tenantID, runID, by string) (Run, error) {
	return s.control(ctx, tenantID, runID, func(tx pgx.Tx, r Run) error {
		if r.Ended() || r.State == StateCancelling {
			return nil
		}
		msg := "cancelled by " + by
		if _, err := tx.Exec(ctx, `UPDATE fleet_run_targets SET state = 'not-started', reason = 'cancelled', message = $2
			WHERE run_id = $1 AND state = 'waiting'`, r.ID, msg); err != nil {
			return fmt.Errorf("cancelling run %s: %w", r.ID, err)
		}
		if _, err := tx.Exec(ctx, `UPDATE fleet_runs SET state = 'cancelling', state_reason = 'cancelled', state_message = $2,
			cancel_requested_at = now(), waiting_reason = '', waiting_message = '', updated_at = now() WHERE id = $1`, r.ID, msg); err != nil {
			return fmt.Errorf("cancelling run %s: %w", r.ID, err)
		}
		rows, err := tx.Query(ctx, `SELECT node_id, command_id FROM fleet_run_targets WHERE run_id = $1 AND state = 'started' ORDER BY ordinal`, r.ID)
		if err != nil {
			return fmt.Errorf("cancelling run %s: %w", r.ID, err)
		}
		type open struct{ node, cmd string }
		var opens []open
		for rows.Next() {
			var o open
			if err := rows.Scan(&o.node, &o.cmd); err != nil {
				rows.Close()
				return fmt.Errorf("cancelling run %s: %w", r.ID, err)
			}
			opens = append(opens, o)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return fmt.Errorf("cancelling run %s: %w", r.ID, err)
		}
		for _, o := range opens {
			// A pending command settles here, and the settle hook moves
			// its target in this same transaction.
			if _, err := s.q.Cancel(ctx, tx, o.node, o.cmd); err != nil {
				return fmt.Errorf("cancelling command %s of run %s: %w", o.cmd, r.ID, err)
			}
		}
		return events.Write(ctx, tx, r.TenantID, TopicCancelRequested, map[string]any{"runId": r.ID, "requester": r.Requester, "by": by, "open": len(opens)})
	})
}

// control runs fn on the locked run and returns the run as it is after,
// waking the advancer (which ends a run that has nothing open).
func (s *Service) control(ctx context.Context, tenantID, runID string, fn func(tx pgx.Tx, r Run) error) (Run, error) {
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		r, err := lockRun(ctx, tx, tenantID, runID)
		if err != nil {
			return err
		}
		return fn(tx, r)
	})
	if err != nil {
		return Run{}, err
	}
	s.Wake()
	return s.Get(ctx, tenantID, runID)
}
