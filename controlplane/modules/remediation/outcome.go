package remediation

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/better-compute/commands/controlplane/fleet/pools"
	"github.com/better-compute/commands/controlplane/modules"
)

// running follows the destructive command: still waiting for approvals,
// in flight, or settled (a failure finishes the remediation; a success
// goes to verification).
func (e *Engine) running(ctx context.Context, tx pgx.Tx, r Row) error {
	cmd, err := e.mc.Commands().Get(ctx, tx, r.NodeID, r.CommandID)
	if err != nil {
		return err
	}
	if !cmd.State.Terminal() {
		if !cmd.AwaitingApproval && r.WaitingReason == WaitAwaitingApproval {
			return e.setWaiting(ctx, tx, r, "", "")
		}
		return nil
	}
	if cmd.State == modules.StateFailed && r.Action == ActionGPUReset && cmd.Reason == ReasonGPUUnhealthy {
		// The reset ran and the GPU is still unhealthy: resetting again
		// will not help, so it escalates, as a reset whose fresh inventory
		// still shows the condition does.
		msg := fmt.Sprintf("gpu.reset %s ran but %s stays unhealthy (%s): escalated instead of resetting again", cmd.ID, r.GPU, cmd.Message)
		if err := e.mc.Event(ctx, tx, r.TenantID, TopicEscalated, map[string]any{"remediationId": r.ID, "nodeId": r.NodeID, "pool": r.Pool,
			"gpu": r.GPU, "trigger": r.Trigger, "commandId": r.CommandID, "message": msg}); err != nil {
			return err
		}
		return e.finish(ctx, tx, r, StateEscalated, OutcomeFailed, msg)
	}
	if cmd.State != modules.StateSucceeded {
		return e.finish(ctx, tx, r, StateFailed, OutcomeFailed, fmt.Sprintf("%s %s ended %s (%s) %s", r.Action, cmd.ID, cmd.State, cmd.Reason, cmd.Message))
	}
	verifyID := ""
	if r.Action == ActionGPUReset {
		v, _, err := e.mc.Commands().Enqueue(ctx, tx, modules.Command{TenantID: r.TenantID, NodeID: r.NodeID, Kind: KindInventoryRefresh,
			Payload: json.RawMessage(`{"sections":["gpus"]}`), IdempotencyKey: modules.StepKey(r.ID, "verify", r.Attempt), NotAfter: e.opts.Now().Add(e.opts.NotAfter)})
		if err != nil {
			return err
		}
		verifyID = v.ID
	}
	if _, err := tx.Exec(ctx, `UPDATE remediations SET state = 'verifying', verify_command_id = $2, waiting_reason = '', waiting_message = '', updated_at = now() WHERE id = $1`,
		r.ID, verifyID); err != nil {
		return fmt.Errorf("verifying remediation %s: %w", r.ID, err)
	}
	return e.mc.Event(ctx, tx, r.TenantID, TopicVerifying, map[string]any{"remediationId": r.ID, "nodeId": r.NodeID, "action": r.Action,
		"commandId": r.CommandID, "verifyCommandId": verifyID})
}

// verifying checks that the work helped: for a reset, the fresh inventory
// (the verify command's result) shows the GPU's condition cleared, else it
// escalates instead of resetting again; for a reboot, the boot id changed
// and the trigger cleared within VerifyTimeout.
func (e *Engine) verifying(ctx context.Context, tx pgx.Tx, r Row) error {
	switch r.Action {
	case ActionGPUReset:
		v, err := e.mc.Commands().Get(ctx, tx, r.NodeID, r.VerifyCommandID)
		if err != nil {
			return err
		}
		if !v.State.Terminal() {
			return nil
		}
		if v.State != modules.StateSucceeded {
			return e.finish(ctx, tx, r, StateFailed, OutcomeUnverified, fmt.Sprintf("the fresh inventory (%s) ended %s (%s): the reset's outcome is unknown", v.ID, v.State, v.Reason))
		}
		n, err := modules.ReadNode(ctx, tx, r.NodeID)
		if err != nil {
			return err
		}
		n.Inventory = v.Result
		if still, why := e.opts.StillNeeded(n, r); still {
			msg := fmt.Sprintf("after gpu.reset %s the fresh inventory (%s) still shows %s on %s (%s): escalated instead of resetting again", r.CommandID, v.ID, r.Trigger, r.GPU, why)
			if err := e.mc.Event(ctx, tx, r.TenantID, TopicEscalated, map[string]any{"remediationId": r.ID, "nodeId": r.NodeID, "pool": r.Pool,
				"gpu": r.GPU, "trigger": r.Trigger, "commandId": r.CommandID, "verifyCommandId": v.ID, "message": msg}); err != nil {
				return err
			}
			return e.finish(ctx, tx, r, StateEscalated, OutcomeUnverified, msg)
		}
		return e.finish(ctx, tx, r, StateDone, OutcomeVerified, fmt.Sprintf("the fresh inventory (%s) shows %s cleared on %s", v.ID, r.Trigger, r.GPU))
	case ActionNodeReboot:
		n, err := modules.ReadNode(ctx, tx, r.NodeID)
		if err != nil {
			return err
		}
		cmd, err := e.mc.Commands().Get(ctx, tx, r.NodeID, r.CommandID)
		if err != nil {
			return err
		}
		booted := n.BootID != "" && n.BootID != r.BootIDBefore
		still, why := e.opts.StillNeeded(n, r)
		if booted && !still {
			return e.finish(ctx, tx, r, StateDone, OutcomeVerified, fmt.Sprintf("the node came back with boot id %s (was %s) and %s cleared", n.BootID, r.BootIDBefore, r.Trigger))
		}
		if cmd.SettledAt != nil && e.opts.Now().Sub(*cmd.SettledAt) > e.opts.VerifyTimeout {
			msg := fmt.Sprintf("%s after the reboot: boot id %s (was %s)", r.Trigger, n.BootID, r.BootIDBefore)
			if !booted {
				msg = "the boot id did not change after the reboot (" + n.BootID + ")"
			} else if still {
				msg = r.Trigger + " still holds after the reboot: " + why
			}
			return e.finish(ctx, tx, r, StateFailed, OutcomeUnverified, msg)
		}
		return nil
	}
	return e.finish(ctx, tx, r, StateFailed, OutcomeFailed, "unknown action "+r.Action)
}

// finish ends r, releases its lock, publishes remediation.finished, and
// trips the pool's breaker when too many of its remediations failed or
// stayed unhealthy within the breaker's window.
func (e *Engine) finish(ctx context.Context, tx pgx.Tx, r Row, state, outcome, msg string) error {
	if _, err := tx.Exec(ctx, lockNodeSQL, r.NodeID); err != nil {
		return fmt.Errorf("finishing remediation %s: %w", r.ID, err)
	}
	if _, err := tx.Exec(ctx, `UPDATE remediations SET state = $2, outcome = $3, outcome_message = $4, finished_at = now(), updated_at = now(),
		waiting_reason = '', waiting_message = '' WHERE id = $1`, r.ID, state, outcome, msg); err != nil {
		return fmt.Errorf("finishing remediation %s: %w", r.ID, err)
	}
	if _, err := pools.Release(ctx, tx, r.NodeID, r.ID); err != nil {
		return err
	}
	e.mc.Logger().Info("remediation finished", "remediation_id", r.ID, "node_id", r.NodeID, "state", state, "outcome", outcome, "message", msg)
	if err := e.mc.Event(ctx, tx, r.TenantID, TopicFinished, map[string]any{"remediationId": r.ID, "nodeId": r.NodeID, "pool": r.Pool, "action": r.Action,
		"gpu": r.GPU, "state": state, "outcome": outcome, "message": msg, "commandId": r.CommandID, "batchId": r.BatchID}); err != nil {
		return err
	}
	if outcome != OutcomeFailed && outcome != OutcomeUnverified {
		return nil
	}
	b, err := pools.Get(ctx, tx, r.TenantID, r.Pool)
	if err != nil || b.BreakerFailures == 0 {
		return err
	}
	var failures int
	if err := tx.QueryRow(ctx, `SELECT `+pools.FailuresSQL("$3"), r.TenantID, r.Pool, int(b.BreakerWindow/time.Second)).Scan(&failures); err != nil {
		return fmt.Errorf("counting the failures of pool %s: %w", r.Pool, err)
	}
	if failures < b.BreakerFailures {
		return nil
	}
	_, err = pools.Trip(ctx, tx, r.TenantID, r.Pool, fmt.Sprintf("%d remediation(s) failed or stayed unhealthy within %s (breaker at %d); the last: %s on %s: %s",
		failures, b.BreakerWindow, b.BreakerFailures, r.Action, r.NodeID, msg))
	return err
}
