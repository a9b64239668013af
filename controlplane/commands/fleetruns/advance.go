package fleetruns

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/better-compute/commands/controlplane/commands/batches"
	"github.com/better-compute/commands/controlplane/commands/events"
	"github.com/better-compute/commands/controlplane/commands/queue"
	"github.com/better-compute/commands/controlplane/fleet/pools"
)

// MaxStartsPerPass bounds the commands one pass queues, so that a run over
// thousands of nodes commits its first commands (and the gateway sends
// them) while the next pass queues more.
const MaxStartsPerPass = 2000

// enqueueSetSize is how many commands a pass queues with one
// queue.EnqueueSet, in its transaction: EnqueueSet's cost a command grows
// with the set (on two shared cores, 10,000 nodes: about 0.25 ms a command
// in sets of 100, 2-5 ms in one set of 2,000, where the pass spent most of
// a run's time; BenchmarkFleetRuns).
const enqueueSetSize = 100

// LockHolder is the holder name of a disruptive run's maintenance locks.
const LockHolder = "fleet-run"

// passResult says what a pass did: whether it changed anything, and
// whether the run could start more at once (another pass without waiting).
type passResult struct {
	changed, more bool
}

// advance runs one pass over run runID in tx: it settles what the run's
// state and counts decide (the error limit crossed, everything done), and
// starts the next waiting targets up to the concurrency limit, within the
// batch's approval and the pools' budgets. The run's row is locked for the
// pass, so two passes over one run take turns; each target's command is
// queued under its run:<runId>:<nodeId> key in the transaction that marks
// the target started, so no crash can start a node twice.
func (s *Service) advance(ctx context.Context, tx pgx.Tx, runID string) (passResult, error) {
	r, err := scanRun(tx.QueryRow(ctx, `SELECT `+runColumns+` FROM fleet_runs WHERE id = $1 AND finished_at IS NULL FOR UPDATE`, runID))
	if errors.Is(err, pgx.ErrNoRows) {
		return passResult{}, nil
	}
	if err != nil {
		return passResult{}, fmt.Errorf("locking run %s: %w", runID, err)
	}
	// A settle the hook did not see (a replica of an older release
	// settled the command) is caught up here, so a run never waits on a
	// command that already ended.
	if _, err := tx.Exec(ctx, catchUpSQL, runID); err != nil {
		return passResult{}, fmt.Errorf("catching up the settled targets of run %s: %w", runID, err)
	}
	c, err := counts(ctx, tx, runID)
	if err != nil {
		return passResult{}, err
	}
	started, waiting := c.ByState[TargetStarted], c.ByState[TargetWaiting]
	// What settled since the last pass (start publishes what it started).
	if err := s.progress(ctx, tx, r, c); err != nil {
		return passResult{}, err
	}
	switch r.State {
	case StateRunning:
		if c.Failures() > r.ErrorLimit {
			msg := fmt.Sprintf("%d failure(s) exceed the error limit %d (maxErrors %s): no new command starts", c.Failures(), r.ErrorLimit, r.MaxErrors)
			return passResult{changed: true}, s.stop(ctx, tx, r, c, ReasonMaxErrors, msg)
		}
		if waiting == 0 {
			if started == 0 {
				return passResult{changed: true}, s.finish(ctx, tx, r, c)
			}
			return passResult{}, s.setWaiting(ctx, tx, r, "", "")
		}
		return s.start(ctx, tx, r, c)
	case StatePaused:
		if waiting == 0 && started == 0 {
			return passResult{changed: true}, s.finish(ctx, tx, r, c)
		}
		return passResult{}, s.setWaiting(ctx, tx, r, WaitPaused, "the run is paused: better-compute runs resume "+r.ID+" lets it start nodes again")
	case StateStopping, StateCancelling:
		if started == 0 {
			return passResult{changed: true}, s.finish(ctx, tx, r, c)
		}
	}
	return passResult{}, nil
}

// start queues the next waiting targets' commands.
func (s *Service) start(ctx context.Context, tx pgx.Tx, r Run, c Counts) (passResult, error) {
	if r.BatchID != "" {
		b, err := batches.Get(ctx, tx, r.TenantID, r.BatchID)
		if err != nil {
			return passResult{}, fmt.Errorf("reading the batch of run %s: %w", r.ID, err)
		}
		if b.State == batches.StateExpired || !s.now().Before(b.Deadline) {
			// An approval is valid until the batch's deadline: a node
			// would refuse a command sent under it after that.
			return passResult{changed: true}, s.stop(ctx, tx, r, c, ReasonBatchExpired,
				fmt.Sprintf("batch %s passed its deadline (%s) before the run started every node: create a new run", b.ID, b.Deadline.UTC().Format(time.RFC3339)))
		}
		switch b.State {
		case batches.StateAwaiting:
			return passResult{}, s.setWaiting(ctx, tx, r, WaitApproval, fmt.Sprintf(
				"batch %s awaits %d more approval(s) (%d of %d): better-compute batch approve --tenant %s --batch %s --key approver.pem",
				b.ID, b.Needed(), len(b.Approvals), b.Threshold, r.TenantID, b.ID))
		}
	}
	slots := min(r.ConcurrencyLimit-c.ByState[TargetStarted], MaxStartsPerPass)
	if slots <= 0 {
		return passResult{}, s.setWaiting(ctx, tx, r, "", "")
	}
	picked, wait, err := s.pick(ctx, tx, r, slots)
	if err != nil {
		return passResult{}, err
	}
	if len(picked) == 0 {
		return passResult{}, s.setWaiting(ctx, tx, r, wait.reason, wait.message)
	}
	notAfter := s.now().Add(time.Duration(r.NotAfterSeconds) * time.Second)
	ps := make([]queue.EnqueueParams, len(picked))
	for i, t := range picked {
		ps[i] = queue.EnqueueParams{TenantID: r.TenantID, NodeID: t.NodeID, Kind: r.Kind, Payload: r.Payload,
			IdempotencyKey: queue.FleetRunKey(r.ID, t.NodeID), NotAfter: notAfter, BatchID: r.BatchID,
			Requester: r.Requester, RequestedVia: queue.ViaFleetRun}
		if s.prepare != nil {
			// A kind's per-node part (logs.collect's presigned upload).
			if err := s.prepare(ctx, &ps[i]); err != nil {
				return passResult{}, fmt.Errorf("preparing the command of run %s on %s: %w", r.ID, t.NodeID, err)
			}
		}
	}
	outs := make([]queue.EnqueueOutcome, 0, len(ps))
	for lo := 0; lo < len(ps); lo += enqueueSetSize {
		o, err := s.q.EnqueueSet(ctx, tx, ps[lo:min(len(ps), lo+enqueueSetSize)])
		if err != nil {
			return passResult{}, fmt.Errorf("queueing %d command(s) of run %s: %w", len(ps), r.ID, err)
		}
		outs = append(outs, o...)
	}
	ords, states, cmds, reasons, msgs := make([]int, len(picked)), make([]string, len(picked)), make([]*string, len(picked)), make([]string, len(picked)), make([]string, len(picked))
	var released []string
	for i, t := range picked {
		o := outs[i]
		ords[i] = t.Ordinal
		switch {
		case o.Err != nil:
			// The node changed since the run was created (deleted, a
			// restricted identity now, another role): it is refused now,
			// with the queue's words.
			states[i], reasons[i], msgs[i] = TargetRefused, ReasonEnqueueRefuse, o.Err.Error()
			released = append(released, t.NodeID)
		case o.Command.State.Terminal():
			// A duplicate from before a crash, already settled.
			id := o.Command.ID
			states[i], cmds[i], reasons[i], msgs[i] = string(o.Command.State), &id, o.Command.Reason, o.Command.Message
			released = append(released, t.NodeID)
		default:
			id := o.Command.ID
			states[i], cmds[i] = TargetStarted, &id
		}
	}
	if _, err := tx.Exec(ctx, `UPDATE fleet_run_targets t SET state = u.st, command_id = u.cmd, reason = u.re, message = u.msg,
		started_at = now(), settled_at = CASE WHEN u.st IN ('started', 'refused') THEN NULL ELSE now() END
		FROM unnest($2::int[], $3::text[], $4::text[], $5::text[], $6::text[]) AS u(ord, st, cmd, re, msg)
		WHERE t.run_id = $1 AND t.ordinal = u.ord AND t.state = 'waiting'`, r.ID, ords, states, cmds, reasons, msgs); err != nil {
		return passResult{}, fmt.Errorf("marking %d target(s) of run %s started: %w", len(picked), r.ID, err)
	}
	if r.Disruptive && len(released) > 0 {
		if _, err := tx.Exec(ctx, `DELETE FROM maintenance_locks WHERE remediation_id = $1 AND node_id = ANY ($2::text[])`, r.ID, released); err != nil {
			return passResult{}, fmt.Errorf("giving back the locks of run %s: %w", r.ID, err)
		}
	}
	if _, err := tx.Exec(ctx, `UPDATE fleet_runs SET started_at = coalesce(started_at, now()), updated_at = now(),
		waiting_reason = $2, waiting_message = $3 WHERE id = $1`, r.ID, wait.reason, wait.message); err != nil {
		return passResult{}, fmt.Errorf("updating run %s: %w", r.ID, err)
	}
	after, err := counts(ctx, tx, r.ID)
	if err != nil {
		return passResult{}, err
	}
	if err := s.progress(ctx, tx, r, after); err != nil {
		return passResult{}, err
	}
	more := wait.reason == "" && after.ByState[TargetWaiting] > 0 && after.ByState[TargetStarted] < r.ConcurrencyLimit
	return passResult{changed: true, more: more}, nil
}

type waitFor struct{ reason, message string }

// pick takes up to n waiting targets in order. A disruptive run takes each
// node's maintenance lock within its pool's budget first; a node whose
// pool is full is skipped (later nodes of other pools may start), and the
// first such wait is what the run says it waits for.
func (s *Service) pick(ctx context.Context, tx pgx.Tx, r Run, n int) ([]Target, waitFor, error) {
	var wait waitFor
	scan := n
	if r.Disruptive {
		scan = max(n, 500)
	}
	ts, _, err := s.targets(ctx, tx, r.ID, TargetWaiting, scan, -1)
	if err != nil {
		return nil, wait, err
	}
	if !r.Disruptive {
		return ts[:min(n, len(ts))], wait, nil
	}
	var out []Target
	for _, t := range ts {
		if len(out) == n {
			break
		}
		_, w, err := pools.Acquire(ctx, tx, pools.LockRequest{NodeID: t.NodeID, TenantID: r.TenantID, Pool: t.Pool,
			Holder: LockHolder, RemediationID: r.ID, Action: r.Kind, Reason: "fleet run " + r.ID})
		if err != nil {
			return nil, wait, fmt.Errorf("taking the maintenance lock of %s for run %s: %w", t.NodeID, r.ID, err)
		}
		if w != nil {
			if wait.reason == "" {
				wait = waitFor{reason: w.Reason, message: fmt.Sprintf("node %s waits: %s", t.NodeID, w.Message)}
			}
			continue
		}
		// Counted in its pool's window at once, so that the next node's
		// Acquire in this pass sees it (pools.Acquire counts fleet-run
		// starts beside remediations).
		if _, err := tx.Exec(ctx, `UPDATE fleet_run_targets SET started_at = now() WHERE run_id = $1 AND ordinal = $2`, r.ID, t.Ordinal); err != nil {
			return nil, wait, fmt.Errorf("marking the start of %s for run %s: %w", t.NodeID, r.ID, err)
		}
		out = append(out, t)
	}
	return out, wait, nil
}

// catchUpSQL settles a run's targets whose commands settled without the
// settle hook.
var catchUpSQL = settleTargetsSQL("t.run_id = $1")

// stop ends the starting of new commands: waiting targets become
// not-started with reason, and the run is failed (nothing open) or
// stopping until its open commands settle.
func (s *Service) stop(ctx context.Context, tx pgx.Tx, r Run, c Counts, reason, msg string) error {
	if _, err := tx.Exec(ctx, `UPDATE fleet_run_targets SET state = 'not-started', reason = $2, message = $3
		WHERE run_id = $1 AND state = 'waiting'`, r.ID, reason, msg); err != nil {
		return fmt.Errorf("stopping run %s: %w", r.ID, err)
	}
	if _, err := tx.Exec(ctx, `UPDATE fleet_runs SET state = 'stopping', state_reason = $2, state_message = $3,
		waiting_reason = '', waiting_message = '', updated_at = now() WHERE id = $1`, r.ID, reason, msg); err != nil {
		return fmt.Errorf("stopping run %s: %w", r.ID, err)
	}
	if err := events.Write(ctx, tx, r.TenantID, TopicStopping, map[string]any{"runId": r.ID, "requester": r.Requester, "reason": reason, "message": msg}); err != nil {
		return err
	}
	if c.ByState[TargetStarted] == 0 {
		r.State, r.StateReason, r.StateMessage = StateStopping, reason, msg
		after, err := counts(ctx, tx, r.ID)
		if err != nil {
			return err
		}
		return s.finish(ctx, tx, r, after)
	}
	return nil
}

// finish ends a run whose commands all settled: succeeded when every
// target it could start succeeded, cancelled after a cancel, failed
// otherwise.
func (s *Service) finish(ctx context.Context, tx pgx.Tx, r Run, c Counts) error {
	state, reason, msg := StateSucceeded, "", ""
	// A node refused when its turn came (deleted, another role since the
	// run was created) did not run either.
	bad := c.Failures() + c.ByState[TargetCancelled] + c.ByState[TargetNotStarted] + c.ByReason[ReasonEnqueueRefuse]
	switch {
	case r.State == StateCancelling:
		state, reason, msg = StateCancelled, ReasonCancelled, r.StateMessage
	case r.State == StateStopping:
		state, reason, msg = StateFailed, r.StateReason, r.StateMessage
	case bad > 0:
		state, reason = StateFailed, ReasonNodeFailures
		msg = fmt.Sprintf("%d of %d target(s) did not succeed: %s", bad, c.Targets-c.ByState[TargetRefused], summary(c))
	}
	if atCreation := c.ByState[TargetRefused] - c.ByReason[ReasonEnqueueRefuse]; atCreation > 0 {
		note := fmt.Sprintf("%d target(s) refused at creation", atCreation)
		if msg == "" {
			msg = note
		} else {
			msg += "; " + note
		}
	}
	if _, err := tx.Exec(ctx, `UPDATE fleet_runs SET state = $2, state_reason = $3, state_message = $4, finished_at = now(), updated_at = now(),
		waiting_reason = '', waiting_message = '' WHERE id = $1`, r.ID, state, reason, msg); err != nil {
		return fmt.Errorf("finishing run %s: %w", r.ID, err)
	}
	return events.Write(ctx, tx, r.TenantID, TopicFinished, map[string]any{"runId": r.ID, "requester": r.Requester, "kind": r.Kind, "state": state, "reason": reason,
		"message": msg, "counts": c.ByState})
}

func summary(c Counts) string {
	var parts []string
	for _, st := range []string{TargetFailed, TargetRejected, TargetExpired, TargetCancelled, TargetNotStarted} {
		if n := c.ByState[st]; n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", n, st))
		}
	}
	return strings.Join(parts, ", ")
}

// setWaiting records what the run waits for, publishing fleet.run.waiting
// when it changed.
func (s *Service) setWaiting(ctx context.Context, tx pgx.Tx, r Run, reason, msg string) error {
	if r.WaitingReason == reason && r.WaitingMessage == msg {
		return nil
	}
	if _, err := tx.Exec(ctx, `UPDATE fleet_runs SET waiting_reason = $2, waiting_message = $3, updated_at = now() WHERE id = $1`, r.ID, reason, msg); err != nil {
		return fmt.Errorf("updating run %s: %w", r.ID, err)
	}
	if reason == "" {
		return nil
	}
	return events.Write(ctx, tx, r.TenantID, TopicWaiting, map[string]any{"runId": r.ID, "requester": r.Requester, "reason": reason, "message": msg})
}

// progress publishes fleet.run.progress with the run's counts when they
// changed since the last one published: a watcher follows a run's nodes
// settling without reading every command.settled.
func (s *Service) progress(ctx context.Context, tx pgx.Tx, r Run, c Counts) error {
	var last map[string]int
	if json.Unmarshal(r.published, &last) == nil && maps.Equal(last, c.ByState) {
		return nil
	}
	b, err := json.Marshal(c.ByState)
	if err != nil {
		return fmt.Errorf("encoding the counts of run %s: %w", r.ID, err)
	}
	if _, err := tx.Exec(ctx, `UPDATE fleet_runs SET progress = $2, updated_at = now() WHERE id = $1`, r.ID, b); err != nil {
		return fmt.Errorf("updating run %s: %w", r.ID, err)
	}
	return events.Write(ctx, tx, r.TenantID, TopicProgress, map[string]any{"runId": r.ID, "requester": r.Requester, "state": r.State, "counts": c.ByState})
}
