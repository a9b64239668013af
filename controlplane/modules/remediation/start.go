package remediation

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/better-compute/commands/controlplane/commands/batches"
	"github.com/better-compute/commands/controlplane/fleet/pools"
	"github.com/better-compute/commands/controlplane/modules"
	"github.com/better-compute/commands/internal/trust"
)

// start runs the checks of a waiting remediation and, when they pass,
// takes the lock, creates the platform batch and queues the command.
func (e *Engine) start(ctx context.Context, tx pgx.Tx, r Row) error {
	n, err := modules.ReadNode(ctx, tx, r.NodeID)
	if err != nil {
		return err
	}
	if n.Deleted {
		return e.finish(ctx, tx, r, StateCancelled, "", "node "+r.NodeID+" was deleted")
	}
	if still, why := e.opts.StillNeeded(n, r); !still {
		return e.finish(ctx, tx, r, StateCancelled, "", "the trigger cleared before any work: "+why)
	}
	now := e.opts.Now()
	if n.SessionSeenAt == nil || now.Sub(*n.SessionSeenAt) > e.opts.StaleAfter {
		seen := "never"
		if n.SessionSeenAt != nil {
			seen = n.SessionSeenAt.UTC().Format(time.RFC3339)
		}
		return e.setWaiting(ctx, tx, r, WaitSessionStale, fmt.Sprintf("node %s's session was last seen %s (stale after %s): remediation skips it until it is back", r.NodeID, seen, e.opts.StaleAfter))
	}
	switch r.Action {
	case ActionGPUReset:
		if busy, why := n.GPUInUse(r.GPU); busy {
			return e.setWaiting(ctx, tx, r, WaitGPUInUse, why+": gpu.reset waits until no allocation is live on it")
		}
	case ActionNodeReboot:
		for _, h := range n.Spec.Holds {
			if busy, why := n.GPUInUse(h.GPU); busy {
				return e.setWaiting(ctx, tx, r, WaitAllocationsLive, why+": node.reboot waits until no allocation is live on the node")
			}
		}
		for _, in := range n.Spec.Instances {
			if len(in.PassthroughGPUs) > 0 {
				return e.setWaiting(ctx, tx, r, WaitAllocationsLive, fmt.Sprintf("%s has GPUs passed through: node.reboot waits until no allocation is live on the node", in.Name))
			}
		}
	}
	var recent int
	if err := tx.QueryRow(ctx, `SELECT count(*) FROM remediations WHERE node_id = $1 AND id <> $2 AND started_at > now() - interval '7 days'
		AND state NOT IN ('superseded', 'cancelled')`, r.NodeID, r.ID).Scan(&recent); err != nil {
		return fmt.Errorf("counting the remediations of %s: %w", r.NodeID, err)
	}
	if recent >= e.opts.MaxPerWeek {
		msg := fmt.Sprintf("node %s had %d remediations in the last 7 days (at most %d): a hardware ticket instead of another %s", r.NodeID, recent, e.opts.MaxPerWeek, r.Action)
		if err := e.mc.Event(ctx, tx, r.TenantID, TopicHardwareTicket, map[string]any{"nodeId": r.NodeID, "pool": r.Pool, "remediationId": r.ID,
			"action": r.Action, "gpu": r.GPU, "trigger": r.Trigger, "remediations7d": recent, "message": msg}); err != nil {
			return err
		}
		return e.finish(ctx, tx, r, StateEscalated, OutcomeEscalated, msg)
	}
	_, wait, err := pools.Acquire(ctx, tx, pools.LockRequest{NodeID: r.NodeID, TenantID: r.TenantID, Pool: r.Pool, Holder: e.owner,
		RemediationID: r.ID, Action: r.Action, Reason: r.Trigger})
	if err != nil {
		return err
	}
	if wait != nil {
		return e.setWaiting(ctx, tx, r, wait.Reason, wait.Message)
	}
	payload := json.RawMessage(`{}`)
	if r.Action == ActionGPUReset {
		payload, _ = json.Marshal(map[string]any{"gpus": []string{r.GPU}})
	}
	b, awaiting, err := e.platformBatch(ctx, tx, r, payload, now)
	if err != nil {
		return err
	}
	cmd, _, err := e.mc.Commands().Enqueue(ctx, tx, modules.Command{TenantID: r.TenantID, NodeID: r.NodeID, Kind: r.Action, Payload: payload,
		IdempotencyKey: modules.StepKey(r.ID, r.Action, r.Attempt), NotAfter: now.Add(e.opts.NotAfter), BatchID: b.ID, AwaitingApproval: awaiting})
	if err != nil {
		return err
	}
	waiting, msg := "", ""
	if awaiting {
		waiting, msg = WaitAwaitingApproval, fmt.Sprintf("batch %s waits for %d more approval(s): better-compute batch approve --batch %s --key <approver.pem>", b.ID, b.Needed(), b.ID)
	}
	if _, err := tx.Exec(ctx, `UPDATE remediations SET state = 'running', started_at = now(), batch_id = $2, command_id = $3, boot_id_before = $4,
		waiting_reason = $5, waiting_message = $6, updated_at = now() WHERE id = $1`, r.ID, b.ID, cmd.ID, n.BootID, waiting, msg); err != nil {
		return fmt.Errorf("starting remediation %s: %w", r.ID, err)
	}
	e.mc.Logger().Info("remediation started", "remediation_id", r.ID, "node_id", r.NodeID, "action", r.Action, "gpu", r.GPU, "batch_id", b.ID, "command_id", cmd.ID)
	return e.mc.Event(ctx, tx, r.TenantID, TopicStarted, map[string]any{"remediationId": r.ID, "nodeId": r.NodeID, "pool": r.Pool, "action": r.Action,
		"gpu": r.GPU, "trigger": r.Trigger, "batchId": b.ID, "commandId": cmd.ID, "awaitingApproval": awaiting})
}

// platformBatch creates the batch of r's command, whose one leaf names the
// node and the kind, requested by platform:<owner>. With the quorum on and
// the platform's approver key configured, the platform signs it as one
// approval (audited as a batch approval and an event); people approve the
// rest. It returns whether the command must wait for approvals.
func (e *Engine) platformBatch(ctx context.Context, tx pgx.Tx, r Row, payload []byte, now time.Time) (batches.Batch, bool, error) {
	q := e.opts.Quorum()
	reason := fmt.Sprintf("%s %s on %s: %s", e.owner, r.Action, r.NodeID, r.Trigger)
	if r.GPU != "" {
		reason += " on " + r.GPU
	}
	if r.TriggerMessage != "" {
		reason += " (" + r.TriggerMessage + ")"
	}
	b, _, err := batches.Create(ctx, tx, q, batches.CreateParams{TenantID: r.TenantID, Requester: PlatformRequesterPrefix + e.owner, Reason: reason,
		Scope: []batches.Leaf{{Subject: r.NodeID, Kind: r.Action}}, IdempotencyKey: fmt.Sprintf("%s:%d", r.ID, r.Attempt), Deadline: batches.MaxDeadline}, now)
	if err != nil {
		return batches.Batch{}, false, fmt.Errorf("creating the platform batch of %s: %w", r.ID, err)
	}
	if q.On() && e.opts.PlatformKey != nil && b.State == batches.StateAwaiting {
		sig := trust.SignApproval(e.opts.PlatformKey, b.Statement)
		nb, err := batches.Approve(ctx, tx, q, r.TenantID, b.ID, sig.KeyID, sig.Sig, "platform", false, now)
		if err != nil {
			return batches.Batch{}, false, fmt.Errorf("the platform's approval of batch %s (is pki.platformApproverKey one of pki.approvers?): %w", b.ID, err)
		}
		b = nb
		if err := e.mc.Event(ctx, tx, r.TenantID, TopicPlatformApproved, map[string]any{"batchId": b.ID, "keyId": sig.KeyID,
			"approver": e.opts.PlatformKeyName, "remediationId": r.ID, "nodeId": r.NodeID, "needed": b.Needed()}); err != nil {
			return batches.Batch{}, false, err
		}
	}
	awaiting, err := batches.CheckScope(ctx, tx, r.TenantID, b.ID, r.NodeID, r.Action, payload, now)
	if err != nil {
		return batches.Batch{}, false, fmt.Errorf("checking the platform batch of %s: %w", r.ID, err)
	}
	return b, awaiting, nil
}
