package daemon

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/attribute"

	"github.com/better-compute/commands/bcd/accept"
	"github.com/better-compute/commands/bcd/journal"
	"github.com/better-compute/commands/bcd/lanes"
	"github.com/better-compute/commands/internal/trust"
	"github.com/better-compute/commands/sdk/kind"
)

// Reasons the daemon reports beside the plugins' own.
const (
	// ReasonCancelled: a cancel reached the command before it ran.
	ReasonCancelled = kind.ReasonCancelled
	// ReasonJournalError: the journal could not record the command, so it
	// was not run (it is not journaled either).
	ReasonJournalError = "journal-error"
)

// BatchConsumer is implemented by an accept.Batches that keeps what
// accepted commands use up: "a (batch, leaf) is consumed once", and the
// break-glass allowance counts the unbatched destructive commands of the
// last hour. For a command check 5 accepted on a batch leaf or on the
// allowance, the daemon calls Consume once the command has a lane worker
// (so a BUSY command consumes nothing) and before it journals and runs it.
// Consume checks again as it records, so of two commands racing for one
// leaf, or for the last of the allowance, one is refused: code is the
// refusal (BATCH_UNAPPROVED or UNBATCHED_LIMIT), journaled like check 5's,
// and err says why. With code "" an error means the record could not be
// persisted: the command fails unjournaled, nothing ran, and a redelivery
// tries again. A command already recorded consumes nothing more.
type BatchConsumer interface {
	Consume(cmd accept.Command, unbatched bool, now time.Time) (code accept.Code, err error)
}

// Submit runs cmd through the acceptance checks, the journal, its lane and
// its plugin. It returns once the command is accepted (journaled and synced)
// or refused, or, when it needs a newer node spec, once it starts waiting
// for one. The channel then carries the command's updates (accepted,
// running, progress steps, the outcome) and is closed after the outcome; it
// is closed early, without an outcome, when ctx ends or bcd shuts down, and
// the command goes on. A duplicate of a command bcd knows is answered from
// the journal, or re-attached to the running command: nothing runs twice.
func (d *Daemon) Submit(ctx context.Context, cmd accept.Command) (<-chan Update, error) {
	if cmd.ID == "" {
		return nil, errors.New("submit: command without an id")
	}
	w := newWatcher(ctx)
	d.lock.Lock()
	if d.closing {
		d.lock.Unlock()
		return nil, ErrClosed
	}
	if e, ok := d.active[cmd.ID]; ok {
		d.attach(e, w)
		d.lock.Unlock()
		return w.ch, nil
	}
	rec, found, err := d.journal.Get(cmd.ID)
	if err != nil {
		d.lock.Unlock()
		return nil, fmt.Errorf("submit %s: %w", cmd.ID, err)
	}
	if found {
		d.lock.Unlock()
		u := d.updateOf(rec)
		u.Duplicate = true
		w.ch <- u
		close(w.ch)
		d.logger.Debug("duplicate answered from the journal", "command_id", cmd.ID, "state", rec.State)
		return w.ch, nil
	}
	e := &entry{cmd: cmd, watchers: []*watcher{w}, wake: make(chan struct{})}
	d.startTrace(e)
	d.active[cmd.ID] = e
	d.runs.Add(1)
	d.lock.Unlock()

	dec := d.check(cmd)
	if dec.WaitForSpec {
		go d.waitForSpec(e)
	} else {
		d.decide(e, dec)
	}
	return w.ch, nil
}

// attach adds w to a command bcd is working on and replays its latest
// state. Call with d.lock held.
func (d *Daemon) attach(e *entry, w *watcher) {
	e.watchers = append(e.watchers, w)
	if e.last != nil {
		u := *e.last
		u.Duplicate = true
		w.ch <- u // the buffer is empty: never blocks
	}
	d.logger.Debug("duplicate re-attached to the running command", "command_id", e.cmd.ID)
}

// check runs the acceptance checks over what the daemon knows now.
func (d *Daemon) check(cmd accept.Command) accept.Decision {
	now := d.cfg.Now()
	kinds := map[string]kind.Manifest{}
	if m, ok := d.exec.Manifest(cmd.Kind); ok {
		kinds[cmd.Kind] = m
	}
	return accept.Check(accept.Input{
		Command:           cmd,
		NodeID:            d.cfg.NodeID,
		Role:              d.cfg.Role,
		AllowedKinds:      d.cfg.AllowedKinds,
		Kinds:             kinds,
		AppliedGeneration: d.state.Generation(),
		Now:               now,
		ServerOffset:      d.serverNow().Sub(now),
		Trust:             d.cfg.Trust,
		Batches:           d.cfg.Batches,
		Lanes:             d.pool,
	})
}

// waitForSpec holds a command that needs a newer node spec: "it asks for
// the spec, waits until not_after, then rejects".
func (d *Daemon) waitForSpec(e *entry) {
	if d.cfg.OnSpecRequest != nil {
		d.cfg.OnSpecRequest(d.state.Generation())
	}
	d.logger.Info("command waits for a newer node spec", "command_id", e.cmd.ID, "min_generation", e.cmd.MinGeneration, "applied", d.state.Generation())
	for {
		changed := d.state.SpecChanged()
		dec := d.check(e.cmd)
		if !dec.WaitForSpec {
			d.decide(e, dec)
			return
		}
		left := e.cmd.NotAfter.Sub(d.serverNow())
		timer := time.NewTimer(max(left, 0))
		select {
		case <-changed:
		case <-timer.C:
		case <-e.wake:
			timer.Stop()
			rec := d.newRecord(e.cmd, dec.Manifest)
			rec.State, rec.Reason = journal.StateCancelled, ReasonCancelled
			rec.Message = fmt.Sprintf("cancelled while waiting for node spec generation %d; nothing ran", e.cmd.MinGeneration)
			rec.FinishedAt = d.cfg.Now()
			d.insertAndFinish(e, rec)
			return
		case <-d.baseCtx.Done():
			// Never accepted, so nothing to journal: the gateway replays it.
			timer.Stop()
			d.abandon(e)
			return
		}
		timer.Stop()
	}
}

// decide acts on a final decision: a journaled refusal, an unjournaled
// BUSY, or the hand-over to a lane worker that journals and runs it.
func (d *Daemon) decide(e *entry, dec accept.Decision) {
	rec := d.newRecord(e.cmd, dec.Manifest)
	e.endAccept(dec.Accepted, string(dec.Code))
	if !dec.Accepted {
		rec.State, rec.RejectCode, rec.Reason, rec.Message = journal.StateRejected, string(dec.Code), string(dec.Code), dec.Reason
		rec.FinishedAt = d.cfg.Now()
		d.logger.Info("command refused", "command_id", e.cmd.ID, "kind", e.cmd.Kind, "code", dec.Code, "reason", dec.Reason)
		if dec.Journal() {
			d.insertAndFinish(e, rec)
		} else {
			d.finish(e, rec)
		}
		return
	}
	e.manifest = dec.Manifest
	journaled := make(chan error, 1)
	laneWait := d.child(e, SpanLaneWait)
	err := d.pool.TryRun(dec.Manifest.Lane, func(release func()) {
		laneWait.End()
		e.release = release
		if refused := d.consume(e, rec, dec); refused {
			journaled <- errRefused
			return
		}
		stored, inserted, err := d.journal.Insert(rec)
		journaled <- err
		if err != nil {
			return
		}
		if !inserted {
			// Only another process sharing the file could get here.
			d.finish(e, stored)
			return
		}
		d.run(e, stored)
	})
	if err != nil {
		laneWait.End()
	}
	switch {
	case errors.Is(err, lanes.ErrBusy):
		rec.State, rec.RejectCode, rec.Reason = journal.StateRejected, string(accept.Busy), err.Error()
		rec.FinishedAt = d.cfg.Now()
		d.finish(e, rec) // BUSY is not journaled
		return
	case err != nil:
		// The lanes are closing (bcd is stopping): nothing was accepted, and
		// the gateway delivers the command again to the next session.
		d.logger.Info("not accepted: bcd is stopping", "command_id", e.cmd.ID, "kind", e.cmd.Kind, "error", err)
		d.abandon(e)
		return
	}
	switch err := <-journaled; {
	case errors.Is(err, errRefused):
		// consume finished it.
	case err != nil:
		d.logger.Error("cannot journal the command: not running it", "command_id", e.cmd.ID, "error", err)
		rec.State, rec.Reason, rec.Message = journal.StateFailed, ReasonJournalError, err.Error()
		rec.FinishedAt = d.cfg.Now()
		d.finish(e, rec)
	}
}

// errRefused tells decide that consume refused the command and finished it.
var errRefused = errors.New("refused by check 5 on consumption")

// consume has the batch leaf or the break-glass allowance that check 5
// accepted the command on consumed (see BatchConsumer), on the command's
// lane worker, before it is journaled. It returns true when the command
// must not run, having finished it: refused (journaled) when another
// command took the leaf or the allowance first, failed (not journaled, so
// a redelivery tries again) when the consumption could not be persisted.
func (d *Daemon) consume(e *entry, rec journal.Record, dec accept.Decision) bool {
	if !dec.UsesBatchLeaf && !dec.UsesUnbatchedAllowance {
		return false
	}
	c, ok := d.cfg.Batches.(BatchConsumer)
	if !ok {
		return false
	}
	code, err := c.Consume(e.cmd, dec.UsesUnbatchedAllowance, d.serverNow())
	switch {
	case code != "":
		rec.State, rec.RejectCode, rec.Reason = journal.StateRejected, string(code), string(code)
		rec.Message = fmt.Sprintf("batch %s: %v", e.cmd.BatchID, err)
		if dec.UsesUnbatchedAllowance {
			rec.Message = fmt.Sprintf("destructive kind %q outside an approved batch: %v", e.cmd.Kind, err)
		}
		rec.FinishedAt = d.cfg.Now()
		d.logger.Info("command refused", "command_id", e.cmd.ID, "kind", e.cmd.Kind, "code", code, "reason", rec.Message)
		d.insertAndFinish(e, rec)
		return true
	case err != nil:
		d.logger.Error("cannot record what the destructive command consumes: not running it", "command_id", e.cmd.ID, "error", err)
		rec.State, rec.Reason, rec.Message = journal.StateFailed, ReasonJournalError, err.Error()
		rec.FinishedAt = d.cfg.Now()
		d.finish(e, rec)
		return true
	}
	return false
}

func (d *Daemon) newRecord(cmd accept.Command, m kind.Manifest) journal.Record {
	digest := ""
	if cmd.Envelope != nil && len(cmd.Envelope.GetCommand()) > 0 {
		sum := trust.CommandDigest(cmd.Envelope.GetCommand())
		digest = hex.EncodeToString(sum[:])
	}
	return journal.Record{
		CommandDigest: digest,
		ID:            cmd.ID,
		Kind:          cmd.Kind,
		NodeID:        cmd.NodeID,
		Seq:           cmd.Seq,
		State:         journal.StateAccepted,
		Payload:       cmd.Payload,
		SecretRefs:    cmd.SecretRefs,
		Lane:          m.Lane,
		Flags:         m.Flags,
		BootID:        d.bootID,
		NotAfter:      cmd.NotAfter,
		MinGeneration: cmd.MinGeneration,
		AcceptedAt:    d.cfg.Now(),
	}
}

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

func (d *Daemon) insertAndFinish(e *entry, rec journal.Record) {
	if _, _, err := d.journal.Insert(rec); err != nil {
		d.logger.Error("cannot journal the refusal", "command_id", rec.ID, "error", err)
	}
	d.finish(e, rec)
}

// updateAndFinish journals the outcome without waiting for the sync (it
// joins the next acceptance's commit, or commits within the journal's
// DeferWait): the outcome is the one write that need not be on disk before
// anything else happens; see journal.UpdateDeferred for what a power cut in
// that window means.
func (d *Daemon) updateAndFinish(e *entry, rec journal.Record) {
	if err := d.journal.UpdateDeferred(rec); err != nil {
		d.logger.Error("cannot journal the outcome", "command_id", rec.ID, "error", err)
	}
	d.finish(e, rec)
}

// publish sends a state change or progress step to the command's watchers
// and the subscribers.
func (d *Daemon) publish(e *entry, u Update) {
	d.lock.Lock()
	if u.Progress == nil {
		last := u
		e.last = &last
	}
	ws := append([]*watcher(nil), e.watchers...)
	d.lock.Unlock()
	e.sendLock.Lock()
	if !e.sendClosed {
		for _, w := range ws {
			w.send(u)
		}
	}
	e.sendLock.Unlock()
	d.subs.publish(u)
}

// finish publishes the outcome (already journaled when it is journaled at
// all), closes the watchers and forgets the entry. After it, a duplicate is
// answered from the journal.
func (d *Daemon) finish(e *entry, rec journal.Record) {
	if e.release != nil {
		e.release()
	}
	e.endTrace(&rec)
	u := d.updateOf(rec)
	d.lock.Lock()
	e.rec, e.last = rec, &u
	ws := e.watchers
	e.watchers = nil
	delete(d.active, rec.ID)
	d.lock.Unlock()
	e.sendLock.Lock()
	e.sendClosed = true
	for _, w := range ws {
		w.send(u)
		close(w.ch)
	}
	e.sendLock.Unlock()
	d.subs.publish(u)
	d.logger.Info("command finished", "command_id", rec.ID, "kind", rec.Kind, "state", rec.State, "reason", rec.Reason)
	d.runs.Done()
}

// abandon forgets a command without an outcome (bcd is shutting down, or a
// self-terminating kind waits for its new boot): its watchers are closed.
func (d *Daemon) abandon(e *entry) {
	if e.release != nil {
		e.release()
	}
	e.endTrace(nil)
	d.lock.Lock()
	ws := e.watchers
	e.watchers = nil
	delete(d.active, e.cmd.ID)
	d.lock.Unlock()
	e.sendLock.Lock()
	e.sendClosed = true
	for _, w := range ws {
		close(w.ch)
	}
	e.sendLock.Unlock()
	d.runs.Done()
}

// Cancel asks a command to stop. A running command's plugin is told through
// its context and stops between actions; its real outcome is what is
// reported, so a side effect that already happened is never hidden. A
// command that has not started yet never runs. A finished command is left
// as it is. ErrNotFound means bcd never saw the command.
func (d *Daemon) Cancel(commandID string) error {
	d.lock.Lock()
	if e, ok := d.active[commandID]; ok {
		if !e.cancelRequested {
			e.cancelRequested = true
			if e.cancel != nil {
				e.cancel()
			}
			close(e.wake)
		}
		d.lock.Unlock()
		d.logger.Info("cancel requested", "command_id", commandID)
		return nil
	}
	d.lock.Unlock()
	_, found, err := d.journal.Get(commandID)
	if err != nil {
		return fmt.Errorf("cancel %s: %w", commandID, err)
	}
	if !found {
		return fmt.Errorf("cancel %s: %w", commandID, ErrNotFound)
	}
	return nil
}
