package journal

import (
	"encoding/json"
	"fmt"
	"sort"

	bolt "go.etcd.io/bbolt"
)

// Get returns the record of command id.
func (j *Journal) Get(id string) (Record, bool, error) {
	j.ckpt.RLock()
	defer j.ckpt.RUnlock()
	if e, ok := j.overlayEntry(id); ok {
		return e.rec, true, nil
	}
	rec, ok, err := j.getFile(id)
	if err != nil {
		return Record{}, false, fmt.Errorf("reading journal record %s: %w", id, err)
	}
	return rec, ok, nil
}

// getFile reads id's record from the bbolt file alone.
func (j *Journal) getFile(id string) (Record, bool, error) {
	var rec Record
	var found bool
	err := j.db.View(func(tx *bolt.Tx) error {
		v := tx.Bucket(bucketCommands).Get([]byte(id))
		if v == nil {
			return nil
		}
		found = true
		var err error
		rec, err = decodeRecord(v)
		return err
	})
	return rec, found, err
}

func decodeRecord(v []byte) (Record, error) {
	var r Record
	err := json.Unmarshal(v, &r)
	return r, err
}

// Unfinished returns the records that are accepted or running, oldest first.
func (j *Journal) Unfinished() ([]Record, error) {
	var out []Record
	err := j.scan(false, func(r Record) bool {
		if !r.State.Terminal() {
			out = append(out, r)
		}
		return true
	})
	return out, err
}

// Recent returns up to limit records, newest first (support bundles).
func (j *Journal) Recent(limit int) ([]Record, error) {
	var out []Record
	if limit <= 0 {
		return nil, nil
	}
	err := j.scan(true, func(r Record) bool {
		out = append(out, r)
		return len(out) < limit
	})
	return out, err
}

// scan calls fn on records in insertion order (or reversed) until it
// returns false: the file's, each in its overlay state when it has one,
// and the overlay's records that the file does not have yet, which are
// newer than all of the file's.
func (j *Journal) scan(newestFirst bool, fn func(Record) bool) error {
	j.ckpt.RLock()
	defer j.ckpt.RUnlock()
	j.overlayLock.Lock()
	over := make(map[string]Record, len(j.overlay))
	var fresh []Record
	for id, e := range j.overlay {
		over[id] = e.rec
		if e.fresh {
			fresh = append(fresh, e.rec)
		}
	}
	j.overlayLock.Unlock()
	sort.Slice(fresh, func(a, b int) bool { return fresh[a].Order < fresh[b].Order })
	if newestFirst {
		for i := len(fresh) - 1; i >= 0; i-- {
			if !fn(fresh[i]) {
				return nil
			}
		}
	}
	stopped := false
	err := j.db.View(func(tx *bolt.Tx) error {
		cmds := tx.Bucket(bucketCommands)
		c := tx.Bucket(bucketOrder).Cursor()
		k, v := c.First()
		next := c.Next
		if newestFirst {
			k, v = c.Last()
			next = c.Prev
		}
		for ; k != nil; k, v = next() {
			raw := cmds.Get(v)
			if raw == nil {
				continue
			}
			r, ok := over[string(v)]
			if !ok {
				var err error
				if r, err = decodeRecord(raw); err != nil {
					return fmt.Errorf("record %s: %w", v, err)
				}
			}
			if !fn(r) {
				stopped = true
				return nil
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("reading the journal: %w", err)
	}
	if !newestFirst && !stopped {
		for _, r := range fresh {
			if !fn(r) {
				return nil
			}
		}
	}
	return nil
}
