package daemon

import (
	"context"
	"fmt"

	"github.com/better-compute/commands/bcd/accept"
	"github.com/better-compute/commands/bcd/journal"
	"github.com/better-compute/commands/sdk/kind"
)

// RecoverReport says what Recover did with each unfinished command.
type RecoverReport struct {
	// Rerun are retry-safe commands started again.
	Rerun []string
	// Interrupted failed with reason interrupted.
	Interrupted []string
	// Rebooted are self-terminating commands a new boot completed.
	Rebooted []string
	// NotRebooted are self-terminating commands that failed because the
	// boot id did not change.
	NotRebooted []string
	// HandedOff are commands the Handoff settled; Pending those it left
	// unfinished for later.
	HandedOff []string
	Pending   []string
}

// Recover settles the commands the journal holds as accepted or running,
// which a crash (or a stop) of bcd left unfinished:
//   - a self-terminating kind succeeds with rebooted when the boot id
//     changed since it was journaled, and fails (reboot-did-not-happen)
//     when it did not;
//   - a retry-safe kind runs again, unless not_after has passed or its kind
//     is no longer loaded;
//   - anything else fails with reason interrupted: its owner decides.
//
// The outcomes go to the subscribers; a rerun command can be re-attached
// to with Submit. Call it once, before the first Submit.
func (d *Daemon) Recover(ctx context.Context) (RecoverReport, error) {
	var rep RecoverReport
	recs, err := d.journal.Unfinished()
	if err != nil {
		return rep, fmt.Errorf("recover: %w", err)
	}
	for _, rec := range recs {
		if err := ctx.Err(); err != nil {
			return rep, fmt.Errorf("recover: %w", err)
		}
		now := d.cfg.Now()
		settle := func(state journal.State, reason, message string) {
			rec.State, rec.Reason, rec.Message, rec.FinishedAt = state, reason, message, now
			if err := d.journal.Update(rec); err != nil {
				d.logger.Error("cannot journal the recovered outcome", "command_id", rec.ID, "error", err)
			}
			d.subs.publish(d.updateOf(rec))
			d.logger.Info("command finished", "command_id", rec.ID, "kind", rec.Kind, "state", rec.State, "reason", rec.Reason, "recovered", true)
		}
		switch {
		case d.cfg.Handoff != nil && d.cfg.Handoff.Handles(rec.Kind):
			out, pending := d.cfg.Handoff.Recovered(rec)
			if pending {
				d.logger.Info("a handed-off command waits for its outcome", "command_id", rec.ID, "kind", rec.Kind)
				rep.Pending = append(rep.Pending, rec.ID)
				continue
			}
			d.settleRecord(rec, out)
			rep.HandedOff = append(rep.HandedOff, rec.ID)
		case rec.Flags.SelfTerminating && rec.BootID != "" && rec.BootID != d.bootID:
			rec.Rebooted = true
			settle(journal.StateSucceeded, "", "a new boot completed it")
			rep.Rebooted = append(rep.Rebooted, rec.ID)
		case rec.Flags.SelfTerminating:
			settle(journal.StateFailed, journal.ReasonNotRebooted, "bcd restarted on the same boot: the reboot did not happen")
			rep.NotRebooted = append(rep.NotRebooted, rec.ID)
		case !rec.Flags.RetrySafe:
			settle(journal.StateFailed, journal.ReasonInterrupted, "bcd stopped while the command ran; the kind is not retry-safe, so it was not run again")
			rep.Interrupted = append(rep.Interrupted, rec.ID)
		default:
			m, ok := d.exec.Manifest(rec.Kind)
			switch {
			case !ok:
				settle(journal.StateFailed, journal.ReasonInterrupted, "bcd stopped while the command ran, and its kind is no longer loaded")
				rep.Interrupted = append(rep.Interrupted, rec.ID)
			case !d.serverNow().Before(rec.NotAfter):
				settle(journal.StateFailed, journal.ReasonInterrupted, "bcd stopped while the command ran, and not_after passed before it could run again")
				rep.Interrupted = append(rep.Interrupted, rec.ID)
			default:
				if err := d.rerun(rec, m); err != nil {
					return rep, err
				}
				rep.Rerun = append(rep.Rerun, rec.ID)
			}
		}
	}
	if len(recs) > 0 {
		d.logger.Info("recovered the journal", "rerun", len(rep.Rerun), "interrupted", len(rep.Interrupted), "rebooted", len(rep.Rebooted), "not_rebooted", len(rep.NotRebooted))
	}
	return rep, nil
}

// rerun queues a retry-safe record on its lane, waiting for a worker, so a
// crash that left more commands than workers loses none.
func (d *Daemon) rerun(rec journal.Record, m kind.Manifest) error {
	cmd := accept.Command{ID: rec.ID, NodeID: rec.NodeID, Seq: rec.Seq, Kind: rec.Kind, Payload: rec.Payload, NotAfter: rec.NotAfter, MinGeneration: rec.MinGeneration, SecretRefs: rec.SecretRefs}
	e := &entry{cmd: cmd, manifest: m, wake: make(chan struct{})}
	d.lock.Lock()
	if d.closing {
		d.lock.Unlock()
		return fmt.Errorf("recover: %w", ErrClosed)
	}
	d.active[rec.ID] = e
	d.runs.Add(1)
	d.lock.Unlock()
	d.logger.Info("running a retry-safe command again", "command_id", rec.ID, "kind", rec.Kind, "attempts", rec.Attempts)
	go func() {
		if err := d.pool.Run(d.baseCtx, m.Lane, func(release func()) {
			e.release = release
			d.run(e, rec)
		}); err != nil {
			d.abandon(e)
		}
	}()
	return nil
}
