package daemon

import (
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/better-compute/commands/bcd/accept"
	"github.com/better-compute/commands/bcd/journal"
	"github.com/better-compute/commands/bcd/lanes"
	"github.com/better-compute/commands/internal/trust"
	"github.com/better-compute/commands/sdk/kind"
)

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
