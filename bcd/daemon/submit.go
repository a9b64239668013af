package daemon

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/better-compute/commands/bcd/accept"
	"github.com/better-compute/commands/bcd/journal"
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
