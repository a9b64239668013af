package journal

import (
	"errors"
	"fmt"
	"time"
)

// Insert stores rec unless a record with its id exists, in which case the
// stored one is returned with inserted false. It returns after the write is
// synced to disk.
func (j *Journal) Insert(rec Record) (stored Record, inserted bool, err error) {
	if rec.ID == "" {
		return Record{}, false, errors.New("journal record without a command id")
	}
	r := j.commit.do(&op{kind: opInsert, rec: rec, version: j.versions.Add(1)})
	if r.err != nil {
		return Record{}, false, fmt.Errorf("journaling command %s: %w", rec.ID, r.err)
	}
	return r.stored, r.inserted, nil
}

// Update replaces the record of rec.ID, which must exist, keeping its
// order. It returns after the write is synced to disk.
func (j *Journal) Update(rec Record) error {
	if r := j.commit.do(&op{kind: opUpdate, rec: rec, version: j.versions.Add(1)}); r.err != nil {
		return fmt.Errorf("journaling command %s: %w", rec.ID, r.err)
	}
	return nil
}

// UpdateDeferred is Update without waiting for the sync: the write joins
// the next synced write (the next command's acceptance, which must be on
// disk before that command runs) or is synced on its own after
// Options.DeferWait. Readers of this journal see it at once. bcd uses it for
// a command's outcome: the one write per command that need not be on disk
// before anything else happens. If the node loses power in that window the
// record reads as accepted and unfinished at the next start, the case a
// crash mid-run already is: a retry-safe kind runs again, any other fails
// with interrupted; the control plane keeps the first terminal state it
// stored and never redelivers a settled command. Close syncs what is
// pending.
func (j *Journal) UpdateDeferred(rec Record) error {
	if rec.ID == "" {
		return errors.New("journal record without a command id")
	}
	j.ckpt.RLock()
	prev, ok := j.overlayEntry(rec.ID)
	if !ok {
		var err error
		prev.rec, ok, err = j.getFile(rec.ID)
		if err != nil {
			j.ckpt.RUnlock()
			return fmt.Errorf("journaling command %s: %w", rec.ID, err)
		}
	}
	if !ok {
		j.ckpt.RUnlock()
		return fmt.Errorf("journaling command %s: no record of command %s", rec.ID, rec.ID)
	}
	rec.Order = prev.rec.Order
	v := j.versions.Add(1)
	j.publish(map[string]entry{rec.ID: {rec: rec, fresh: prev.fresh, version: v}}, []string{rec.ID})
	j.ckpt.RUnlock()
	if err := j.commit.enqueue(&op{kind: opUpdate, rec: rec, deferred: true, version: v}); err != nil {
		return fmt.Errorf("journaling command %s: %w", rec.ID, err)
	}
	return nil
}

// Compact drops terminal records whose not_after (or finish) plus the replay
// horizon is before now, and returns how many it dropped. Unfinished records
// are never dropped: Recover resolves them.
func (j *Journal) Compact(now time.Time) (int, error) {
	r := j.commit.do(&op{kind: opCompact, now: now})
	if r.err != nil {
		return 0, fmt.Errorf("compacting the journal: %w", r.err)
	}
	if r.dropped > 0 {
		j.logger.Debug("compacted journal", "dropped", r.dropped)
	}
	return r.dropped, nil
}
