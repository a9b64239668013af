package daemon

import (
	"context"

	"go.opentelemetry.io/otel/attribute"

	"github.com/better-compute/commands/bcd/journal"
	"github.com/better-compute/commands/sdk/kind"
)

// run executes a journaled command on a lane worker and records its outcome.
func (d *Daemon) run(e *entry, rec journal.Record) {
	ctx, cancel := context.WithCancel(d.baseCtx)
	defer cancel()
	d.lock.Lock()
	e.rec = rec
	e.cancel = cancel
	cancelled := e.cancelRequested
	d.lock.Unlock()
	d.publish(e, updateOf(rec))

	if cancelled {
		rec.State, rec.Reason, rec.Message = journal.StateCancelled, ReasonCancelled, "cancelled before it started; nothing ran"
		rec.FinishedAt = d.cfg.Now()
		d.updateAndFinish(e, rec)
		return
	}
	now := d.cfg.Now()
	rec.State, rec.StartedAt = journal.StateRunning, now
	rec.Attempts++
	// Not synced: Recover treats accepted and running alike.
	d.publish(e, updateOf(rec))

	kc := kind.Command{ID: rec.ID, Kind: rec.Kind, NodeID: rec.NodeID, Payload: rec.Payload, Deadline: now.Add(e.manifest.Timeout.D())}
	if !rec.NotAfter.IsZero() {
		// not_after is server time; the plugin host waits in the node's
		// clock for a plugin that is down, and only until then.
		kc.NotAfter = rec.NotAfter.Add(now.Sub(d.serverNow()))
	}
	if len(rec.SecretRefs) > 0 {
		vals, err := d.fetchSecrets(ctx, rec)
		if err != nil {
			if ctx.Err() != nil && d.baseCtx.Err() != nil {
				d.abandon(e)
				return
			}
			rec.State, rec.FinishedAt = journal.StateFailed, d.cfg.Now()
			rec.Reason, rec.Message = secretsReason(err), "the command's secretRefs could not be fetched; nothing ran: "+err.Error()
			if ctx.Err() != nil {
				rec.State, rec.Reason, rec.Message = journal.StateCancelled, ReasonCancelled, "cancelled while fetching its secrets; nothing ran"
			}
			d.updateAndFinish(e, rec)
			return
		}
		kc.Secrets = vals
		defer wipeSecrets(vals)
	}
	runSpan := d.child(e, SpanPluginRun)
	res, err := d.exec.Execute(ctx, kc, func(percent int, message string) {
		d.publish(e, Update{CommandID: rec.ID, Kind: rec.Kind, State: journal.StateRunning, Progress: &Progress{Percent: percent, Message: message}})
	})
	runSpan.SetAttributes(attribute.String("bc.status", string(res.Status)), attribute.String("bc.reason", res.Reason))
	runSpan.End()
	d.lock.Lock()
	cancelRequested := e.cancelRequested
	d.lock.Unlock()
	if err != nil {
		d.logger.Warn("the plugin did not report the outcome itself", "command_id", rec.ID, "kind", rec.Kind, "reason", res.Reason, "error", err)
	}
	if d.baseCtx.Err() != nil && !cancelRequested && (err != nil || res.Status == kind.StatusCancelled) {
		// bcd is shutting down and stopped the run: leave it unfinished
		// for the next start's Recover.
		d.logger.Info("left unfinished for the next start", "command_id", rec.ID)
		d.abandon(e)
		return
	}
	if rec.Flags.SelfTerminating && res.Status == kind.StatusSucceeded {
		// The reboot is under way: only a new boot id proves it happened,
		// and Recover sees that on the next start.
		rec.Message = "the kind reported success; waiting for the new boot to complete it"
		rec.SetResult(res.Data)
		if err := d.journal.Update(rec); err != nil {
			d.logger.Error("cannot journal the command", "command_id", rec.ID, "error", err)
		}
		d.publish(e, Update{CommandID: rec.ID, Kind: rec.Kind, State: journal.StateRunning, Progress: &Progress{Percent: -1, Message: rec.Message}})
		d.abandon(e)
		return
	}
	switch res.Status {
	case kind.StatusSucceeded:
		rec.State = journal.StateSucceeded
	case kind.StatusCancelled:
		rec.State = journal.StateCancelled
	default:
		rec.State = journal.StateFailed
	}
	rec.Reason, rec.Message = res.Reason, res.Message
	rec.CancelRequested = cancelRequested
	rec.SetResult(res.Data)
	rec.FinishedAt = d.cfg.Now()
	d.updateAndFinish(e, rec)
}
