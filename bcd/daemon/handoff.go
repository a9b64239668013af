package daemon

import (
	"encoding/json"
	"fmt"

	"github.com/better-compute/commands/bcd/journal"
)

// Handoff settles the self-terminating kinds that end the daemon without a
// reboot (daemon.upgrade restarts bcd on the same boot): a new boot id
// proves nothing about them, their own state file does.
type Handoff interface {
	// Handles reports whether kind is settled by the handoff rather than
	// by a new boot id.
	Handles(kind string) bool
	// Recovered is asked, at Recover, for each unfinished record of a kind
	// it handles: the outcome the restart proves, or pending when the
	// outcome is not known yet (the helper still works, or the new daemon
	// must first rejoin); a pending record stays unfinished, is never run
	// again, and is settled later with SettleHandoff.
	Recovered(rec journal.Record) (out HandoffOutcome, pending bool)
}

// HandoffOutcome is how a handed-off command ended.
type HandoffOutcome struct {
	State   journal.State
	Reason  string
	Message string
	Result  json.RawMessage
}

// SettleHandoff gives the unfinished command id its outcome, journals it
// and publishes it; a command that is already terminal is left as it is
// (a state never moves backwards) and reported false.
func (d *Daemon) SettleHandoff(id string, out HandoffOutcome) (bool, error) {
	// settleLock makes the read and the write one step, so two settles of
	// one command journal one outcome.
	d.settleLock.Lock()
	defer d.settleLock.Unlock()
	rec, found, err := d.journal.Get(id)
	if err != nil {
		return false, fmt.Errorf("settling %s: %w", id, err)
	}
	if !found || rec.State.Terminal() {
		return false, nil
	}
	d.lock.Lock()
	_, running := d.active[id]
	d.lock.Unlock()
	if running {
		return false, fmt.Errorf("settling %s: it is running in this daemon", id)
	}
	d.settleRecord(rec, out)
	return true, nil
}

func (d *Daemon) settleRecord(rec journal.Record, out HandoffOutcome) {
	rec.State, rec.Reason, rec.Message, rec.FinishedAt = out.State, out.Reason, out.Message, d.cfg.Now()
	rec.SetResult(out.Result)
	if err := d.journal.Update(rec); err != nil {
		d.logger.Error("cannot journal the handed-off outcome", "command_id", rec.ID, "error", err)
	}
	d.subs.publish(d.updateOf(rec))
	d.logger.Info("command finished", "command_id", rec.ID, "kind", rec.Kind, "state", rec.State, "reason", rec.Reason, "handoff", true)
}
