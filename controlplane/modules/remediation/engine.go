package remediation

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/better-compute/commands/controlplane/commands/batches"
	"github.com/better-compute/commands/controlplane/commands/queue"
	"github.com/better-compute/commands/controlplane/commands/wakes"
	"github.com/better-compute/commands/controlplane/fleet/pools"
	"github.com/better-compute/commands/controlplane/internal/ids"
	"github.com/better-compute/commands/controlplane/modules"
	"github.com/better-compute/commands/internal/trust"
)

// The actions a remediation sends.
const (
	ActionGPUReset   = "gpu.reset"
	ActionNodeReboot = "node.reboot"
	// KindInventoryRefresh verifies a reset: its result is the fresh
	// inventory.
	KindInventoryRefresh = "inventory.refresh"
)

// Waiting reasons of the engine's own (pools' budget and lock reasons
// beside them).
const (
	WaitGPUInUse         = "gpu-in-use"
	WaitAllocationsLive  = "allocations-live"
	WaitSessionStale     = "session-stale"
	WaitAwaitingApproval = "awaiting-approval"
)

// Topics of the remediation events.
const (
	TopicPlanned          = "remediation.planned"
	TopicWaiting          = "remediation.waiting"
	TopicStarted          = "remediation.started"
	TopicVerifying        = "remediation.verifying"
	TopicFinished         = "remediation.finished"
	TopicEscalated        = "remediation.escalated"
	TopicHardwareTicket   = "node.hardware-ticket"
	TopicPlatformApproved = "remediation.batch.platform-approved"
)

// Options tune an Engine.
type Options struct {
	// Quorum is the destructive-batch quorum now (nil: none).
	Quorum func() batches.Quorum
	// PlatformKey, when set and one of the quorum's approver keys, signs
	// the platform's own batches as one approval (PlatformKeyName names
	// it in the audit); people approve the rest of the quorum. Without it,
	// platform batches wait for people.
	PlatformKey     ed25519.PrivateKey
	PlatformKeyName string
	// StaleAfter skips a node whose session was not seen for longer (90s).
	StaleAfter time.Duration
	// VerifyTimeout bounds the wait for a reboot's outcome to show (5m).
	VerifyTimeout time.Duration
	// NotAfter is the destructive command's deadline from its queueing (10m).
	NotAfter time.Duration
	// MaxPerWeek remediations of one node within 7 days escalate to a
	// hardware ticket instead of another try (5; 0 keeps the default).
	MaxPerWeek int
	// StillNeeded says whether the trigger of r still holds on n, in words;
	// false cancels a waiting remediation and, after the work, is the
	// verification that the condition cleared.
	StillNeeded func(n modules.NodeView, r Row) (bool, string)
	// Now is the clock (time.Now).
	Now func() time.Time
}

// Engine runs one owner's remediations: it plans them, takes them through
// the pool's budget and the node's lock, sends the command under a platform
// batch, verifies and finishes them, and trips the pool's breaker.
type Engine struct {
	owner string
	mc    *modules.Context
	opts  Options
}

// NewEngine returns the engine of owner (the module's name) on mc.
func NewEngine(owner string, mc *modules.Context, opts Options) *Engine {
	if opts.StaleAfter <= 0 {
		opts.StaleAfter = 90 * time.Second
	}
	if opts.VerifyTimeout <= 0 {
		opts.VerifyTimeout = 5 * time.Minute
	}
	if opts.NotAfter <= 0 {
		opts.NotAfter = 10 * time.Minute
	}
	if opts.MaxPerWeek <= 0 {
		opts.MaxPerWeek = 5
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Quorum == nil {
		opts.Quorum = func() batches.Quorum { return batches.Quorum{} }
	}
	if opts.StillNeeded == nil {
		opts.StillNeeded = func(modules.NodeView, Row) (bool, string) { return true, "" }
	}
	return &Engine{owner: owner, mc: mc, opts: opts}
}

// Pool is the database the engine works on.
func (e *Engine) Pool() *pgxpool.Pool { return e.mc.Pool() }

// Prefix is the key prefix of the engine's commands: wf:<owner>-, the
// workflow ids being the remediation ids.
func (e *Engine) Prefix() string { return "wf:" + e.owner + "-" }

// Plan is what a planner asks for.
type Plan struct {
	NodeID, TenantID, Pool  string
	Action, GPU             string
	Trigger, TriggerMessage string
	// Cooldown keeps the same node, action and GPU from being planned
	// again this long after its last remediation finished.
	Cooldown time.Duration
}

// lockNodeSQL serialises, per node, planning a remediation and finishing
// one: without it a plan racing a finish sees the running row, then inserts
// beside the just-finished one (the open-row index no longer conflicts),
// skipping the cooldown.
const lockNodeSQL = `SELECT pg_advisory_xact_lock(hashtextextended('bc-remediation:' || $1, 0))`

// PlanTx records a waiting remediation in tx unless one is open for the
// same node, action and GPU, one finished within p.Cooldown, or one
// escalated within 7 days (escalated: not tried again); it publishes
// remediation.planned for a new one.
func (e *Engine) PlanTx(ctx context.Context, tx pgx.Tx, p Plan) (string, bool, error) {
	if _, err := tx.Exec(ctx, lockNodeSQL, p.NodeID); err != nil {
		return "", false, fmt.Errorf("planning %s on %s: %w", p.Action, p.NodeID, err)
	}
	var blocked bool
	if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM remediations WHERE node_id = $1 AND action = $2 AND gpu = $3
		AND (state IN ('waiting', 'running', 'verifying')
		  OR (state NOT IN ('superseded', 'cancelled') AND finished_at > now() - $4 * interval '1 microsecond')
		  OR (state = 'escalated' AND finished_at > now() - interval '7 days')))`,
		p.NodeID, p.Action, p.GPU, p.Cooldown.Microseconds()).Scan(&blocked); err != nil {
		return "", false, fmt.Errorf("planning %s on %s: %w", p.Action, p.NodeID, err)
	}
	if blocked {
		return "", false, nil
	}
	id := ids.New(ids.Prefix(e.owner + "-"))
	tag, err := tx.Exec(ctx, `INSERT INTO remediations (id, node_id, tenant_id, pool, owner, action, gpu, trigger, trigger_message)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
		ON CONFLICT (node_id, action, gpu) WHERE state IN ('waiting', 'running', 'verifying') DO NOTHING`,
		id, p.NodeID, p.TenantID, p.Pool, e.owner, p.Action, p.GPU, p.Trigger, p.TriggerMessage)
	if err != nil {
		return "", false, fmt.Errorf("planning %s on %s: %w", p.Action, p.NodeID, err)
	}
	if tag.RowsAffected() == 0 {
		return "", false, nil
	}
	err = e.mc.Event(ctx, tx, p.TenantID, TopicPlanned, map[string]any{"remediationId": id, "nodeId": p.NodeID, "pool": p.Pool,
		"action": p.Action, "gpu": p.GPU, "trigger": p.Trigger, "message": p.TriggerMessage})
	return id, true, err
}

// Supersede ends the open waiting remediations of node whose action is
// action (a reset a reboot supersedes), in tx.
func (e *Engine) Supersede(ctx context.Context, tx pgx.Tx, nodeID, action, by string) (int64, error) {
	tag, err := tx.Exec(ctx, `UPDATE remediations SET state = 'superseded', superseded_by = $3, finished_at = now(), updated_at = now(),
		waiting_reason = '', waiting_message = '', outcome_message = 'superseded by ' || $3
		WHERE node_id = $1 AND action = $2 AND state = 'waiting'`, nodeID, action, by)
	if err != nil {
		return 0, fmt.Errorf("superseding %s on %s: %w", action, nodeID, err)
	}
	return tag.RowsAffected(), nil
}

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

// running follows the destructive command: still waiting for approvals,
// in flight, or settled (a failure finishes the remediation; a success
// goes to verification).
func (e *Engine) running(ctx context.Context, tx pgx.Tx, r Row) error {
	cmd, err := e.mc.Queue().Get(ctx, tx, r.NodeID, r.CommandID)
	if err != nil {
		return err
	}
	if !cmd.State.Terminal() {
		if !cmd.AwaitingApproval && r.WaitingReason == WaitAwaitingApproval {
			return e.setWaiting(ctx, tx, r, "", "")
		}
		return nil
	}
	if cmd.State == queue.Failed && r.Action == ActionGPUReset && cmd.Reason == ReasonGPUUnhealthy {
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
	if cmd.State != queue.Succeeded {
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
		v, err := e.mc.Queue().Get(ctx, tx, r.NodeID, r.VerifyCommandID)
		if err != nil {
			return err
		}
		if !v.State.Terminal() {
			return nil
		}
		if v.State != queue.Succeeded {
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
		cmd, err := e.mc.Queue().Get(ctx, tx, r.NodeID, r.CommandID)
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
