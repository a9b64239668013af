package journal

// entry is a command's state in the overlay. fresh says it was inserted
// since the last checkpoint: the file has no record of it yet.
type entry struct {
	rec     Record
	fresh   bool
	version uint64
}

// publish puts staged's entries (ids in order) in the overlay, keeping a
// newer write of a command that is already there.
func (j *Journal) publish(staged map[string]entry, ids []string) {
	j.overlayLock.Lock()
	defer j.overlayLock.Unlock()
	for _, id := range ids {
		e := staged[id]
		if cur, ok := j.overlay[id]; ok && cur.version > e.version {
			continue
		}
		j.overlay[id] = e
	}
}

// overlayEntry returns id's entry in the overlay, if any.
func (j *Journal) overlayEntry(id string) (entry, bool) {
	j.overlayLock.Lock()
	defer j.overlayLock.Unlock()
	e, ok := j.overlay[id]
	return e, ok
}

func (j *Journal) overlaySize() int {
	j.overlayLock.Lock()
	defer j.overlayLock.Unlock()
	return len(j.overlay)
}
