package daemon

import "github.com/better-compute/commands/bcd/journal"

// publish sends a state change or progress step to the command's watchers
// and the subscribers. Like finish and abandon, it takes d.lock and then,
// once it is released, e.sendLock (the order Daemon.lock states).
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
