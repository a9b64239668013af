package xid

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"syscall"

	"github.com/better-compute/commands/plugins/internal/gpu"
)

// StoreFile is the store's file name under bcd's state directory.
const StoreFile = "gpu-xids.json"

// Store keeps the XID conditions of this boot in a file. The kernel's ring
// overwrites old records, so an XID read once must be remembered: the store
// folds each record into a condition per (bus id, XID), remembers the last
// sequence number it read so that a second read of the same ring counts
// nothing twice, and starts afresh when the boot id changes. It is safe for
// concurrent use within a process, and across processes: every save happens
// under an flock of "<path>.lock" and replays this process's changes onto
// what the file holds then, so a clear by gpu.reset and a concurrent
// inventory.refresh both stick.
type Store struct {
	path string

	// lock guards state and pending.
	lock  sync.Mutex
	state storeState
	// pending are the changes since the last load, replayed onto the file's
	// state under the file lock at Save, so that two processes sharing the
	// store (inventory.refresh and gpu.reset) never undo each other's work.
	pending []op
}

// op is one change to replay: a record to fold in, or a bus id to clear.
type op struct {
	rec   *Record
	clear string
}

type storeState struct {
	Version int    `json:"version"`
	BootID  string `json:"bootId"`
	// LastSeq is the highest kmsg sequence number folded in; HaveSeq says
	// whether any was.
	LastSeq uint64 `json:"lastSeq"`
	HaveSeq bool   `json:"haveSeq"`
	// Conditions are keyed by bus id and XID, in first-seen order.
	Conditions []gpu.XIDCondition `json:"conditions"`
	// UUIDs maps bus ids to UUIDs, from the driver's banner lines.
	UUIDs map[string]string `json:"uuids,omitempty"`
}

// OpenStore loads the store at path for bootID. A missing file, a file of
// another boot, and a corrupt file all give an empty store for bootID: the
// conditions of a previous boot are not this boot's.
func OpenStore(path, bootID string) (*Store, error) {
	s := &Store{path: path, state: storeState{Version: 1, BootID: bootID}}
	if path == "" {
		return s, nil
	}
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return s, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading XID store %s: %w", path, err)
	}
	var st storeState
	if err := json.Unmarshal(b, &st); err != nil {
		// A torn write cannot happen (Save renames), so this is damage:
		// start again rather than refuse every refresh from now on.
		return s, nil
	}
	if st.BootID != bootID {
		return s, nil
	}
	s.state = st
	return s, nil
}

// load replaces the state with the file's, when it holds this boot.
func (s *Store) load() {
	fresh := storeState{Version: 1, BootID: s.state.BootID}
	if b, err := os.ReadFile(s.path); err == nil {
		var st storeState
		if json.Unmarshal(b, &st) == nil && st.BootID == s.state.BootID {
			fresh = st
		}
	}
	s.state = fresh
}

// BootID returns the boot the store holds.
func (s *Store) BootID() string {
	s.lock.Lock()
	defer s.lock.Unlock()
	return s.state.BootID
}

// Observe folds one kmsg record in, and reports whether it was an XID
// event not seen before. A record whose sequence number is not above the
// last one folded in was read already and is skipped.
func (s *Store) Observe(r Record) bool {
	s.lock.Lock()
	defer s.lock.Unlock()
	if s.path != "" {
		rec := r
		s.pending = append(s.pending, op{rec: &rec})
	}
	return s.observe(r)
}

func (s *Store) observe(r Record) bool {
	if s.state.HaveSeq && r.Seq <= s.state.LastSeq {
		return false
	}
	s.state.LastSeq, s.state.HaveSeq = r.Seq, true
	ev, ok := ParseMessage(r.Message)
	if !ok {
		return false
	}
	return s.fold(ev, r)
}

func (s *Store) fold(ev Event, r Record) bool {
	if ev.Kind == EventUUID {
		if s.state.UUIDs == nil {
			s.state.UUIDs = map[string]string{}
		}
		s.state.UUIDs[ev.BusID] = ev.UUID
		return false
	}
	action := Classify(ev.XID, ev.Message)
	for i := range s.state.Conditions {
		c := &s.state.Conditions[i]
		if c.BusID != ev.BusID || c.XID != ev.XID {
			continue
		}
		c.Count++
		c.LastSeq = r.Seq
		c.LastSeen = gpu.Duration(r.Timestamp)
		c.Message = ev.Message
		if ev.XID == XIDRecoveryAction {
			// The latest recovery action is the one that holds.
			c.Action = action
		} else if rank(action) > rank(c.Action) {
			c.Action = action
		}
		return true
	}
	s.state.Conditions = append(s.state.Conditions, gpu.XIDCondition{
		XID:       ev.XID,
		BusID:     ev.BusID,
		Action:    action,
		Count:     1,
		FirstSeq:  r.Seq,
		LastSeq:   r.Seq,
		FirstSeen: gpu.Duration(r.Timestamp),
		LastSeen:  gpu.Duration(r.Timestamp),
		Message:   ev.Message,
	})
	return true
}

// rank orders actions by how much they ask.
func rank(action string) int {
	switch action {
	case gpu.ActionReboot:
		return 2
	case gpu.ActionReset:
		return 1
	}
	return 0
}

// Rank orders actions by how much they ask: information < reset < reboot.
func Rank(action string) int { return rank(action) }

// ReadKmsg reads every record now in the kernel log at path into the store
// and saves it.
func (s *Store) ReadKmsg(path string) (ReadStats, error) {
	var st ReadStats
	var readErr error
	err := s.update(func() {
		st, readErr = ReadKmsg(path, func(r Record) { s.observe(r) })
	})
	if readErr != nil {
		return st, readErr
	}
	return st, err
}

// update runs fn on the freshest state under the file lock, after replaying
// the pending changes, and saves. s.lock is held throughout.
func (s *Store) update(fn func()) error {
	s.lock.Lock()
	defer s.lock.Unlock()
	if s.path == "" {
		fn()
		return nil
	}
	unlock, err := lockFile(s.path + ".lock")
	if err != nil {
		return err
	}
	defer unlock()
	s.load()
	for _, o := range s.pending {
		if o.rec != nil {
			s.observe(*o.rec)
		} else {
			s.clear(o.clear)
		}
	}
	s.pending = nil
	fn()
	return s.write()
}

// lockFile takes an exclusive flock on path, creating it.
func lockFile(path string) (func(), error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil { //nolint:gosec // the XID store is readable by the node's operators (bcd journal, support bundles)
		return nil, fmt.Errorf("creating XID store directory: %w", err)
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644) //nolint:gosec // the XID store is readable by the node's operators (bcd journal, support bundles)
	if err != nil {
		return nil, fmt.Errorf("opening XID store lock: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("locking XID store: %w", err)
	}
	return func() {
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		f.Close()
	}, nil
}

// Conditions returns the conditions, each marked Ignored when ignore holds
// its XID, ordered by bus id then first sequence number.
func (s *Store) Conditions(ignore Ignore) []gpu.XIDCondition {
	s.lock.Lock()
	defer s.lock.Unlock()
	out := make([]gpu.XIDCondition, len(s.state.Conditions))
	copy(out, s.state.Conditions)
	for i := range out {
		out[i].Ignored = ignore[out[i].XID]
	}
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].BusID != out[j].BusID {
			return out[i].BusID < out[j].BusID
		}
		return out[i].FirstSeq < out[j].FirstSeq
	})
	return out
}

// UUIDs returns the bus id to UUID map the driver's banners gave.
func (s *Store) UUIDs() map[string]string {
	s.lock.Lock()
	defer s.lock.Unlock()
	out := make(map[string]string, len(s.state.UUIDs))
	for k, v := range s.state.UUIDs {
		out[k] = v
	}
	return out
}

// Clear forgets the conditions of the GPU at busID: gpu.reset calls it for
// a GPU the reset left healthy. The sequence number stays, so the records
// already read are not counted again.
func (s *Store) Clear(busID string) {
	busID = gpu.NormalizeBusID(busID)
	s.lock.Lock()
	defer s.lock.Unlock()
	if s.path != "" {
		s.pending = append(s.pending, op{clear: busID})
	}
	s.clear(busID)
}

func (s *Store) clear(busID string) {
	kept := s.state.Conditions[:0]
	for _, c := range s.state.Conditions {
		if c.BusID != busID {
			kept = append(kept, c)
		}
	}
	s.state.Conditions = kept
}

// Save writes the store atomically (a temporary file renamed over the old),
// under the file lock, with this process's changes replayed onto what the
// file holds. A store opened with no path lives in memory only.
func (s *Store) Save() error {
	return s.update(func() {})
}

// write writes the state; s.lock and the file lock are held.
func (s *Store) write() error {
	b, err := json.MarshalIndent(s.state, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding XID store: %w", err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(s.path), ".gpu-xids-*.tmp")
	if err != nil {
		return fmt.Errorf("writing XID store: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return fmt.Errorf("writing XID store: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("syncing XID store: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("writing XID store: %w", err)
	}
	if err := os.Rename(tmp.Name(), s.path); err != nil {
		return fmt.Errorf("replacing XID store %s: %w", s.path, err)
	}
	return nil
}
