package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"github.com/better-compute/commands/bcd/journal"
	"github.com/better-compute/commands/sdk/kind"
)

// State is what bcd knows of its node that plugins ask for: the GPU
// inventory, the applied node spec and its generation, the node's
// conditions, and the journal. It implements kind.Host, which the plugin
// host serves to every plugin, so this state lives in one place. The
// inventory and the spec are kept in files in the state directory, each
// written whole and renamed into place.
type State struct {
	dir     string
	journal *journal.Journal

	// lock guards everything below.
	lock        sync.RWMutex
	inventory   json.RawMessage
	collectedAt time.Time
	generation  int64
	spec        json.RawMessage
	conditions  map[string]kind.Condition
	// specChanged is closed and replaced whenever a newer spec is applied.
	specChanged chan struct{}
}

var _ kind.Host = (*State)(nil)

const (
	inventoryFile  = "inventory.json"
	specFile       = "nodespec.json"
	conditionsFile = "conditions.json"
)

type inventoryDoc struct {
	CollectedAt time.Time       `json:"collectedAt"`
	Inventory   json.RawMessage `json:"inventory"`
}

type specDoc struct {
	Generation int64           `json:"generation"`
	Spec       json.RawMessage `json:"spec"`
}

// NewState loads the node state kept in dir. A file that does not parse is
// ignored (the inventory is collected again, the spec asked for again), not
// fatal.
func NewState(dir string, j *journal.Journal) (*State, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("creating state directory %s: %w", dir, err)
	}
	s := &State{dir: dir, journal: j, conditions: map[string]kind.Condition{}, specChanged: make(chan struct{})}
	var inv inventoryDoc
	if ok, err := readJSON(filepath.Join(dir, inventoryFile), &inv); err != nil {
		return nil, err
	} else if ok {
		s.inventory, s.collectedAt = inv.Inventory, inv.CollectedAt
	}
	var sp specDoc
	if ok, err := readJSON(filepath.Join(dir, specFile), &sp); err != nil {
		return nil, err
	} else if ok {
		s.generation, s.spec = sp.Generation, sp.Spec
	}
	var conds []kind.Condition
	if ok, err := readJSON(filepath.Join(dir, conditionsFile), &conds); err != nil {
		return nil, err
	} else if ok {
		for _, c := range conds {
			s.conditions[c.Type] = c
		}
	}
	return s, nil
}

// readJSON reads path into v; a missing or unparsable file reads as absent.
func readJSON(path string, v any) (bool, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("reading %s: %w", path, err)
	}
	if json.Unmarshal(b, v) != nil {
		return false, nil
	}
	return true, nil
}

// writeJSON writes v to path whole: a temp file, synced, renamed over.
func writeJSON(path string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encoding %s: %w", filepath.Base(path), err)
	}
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("writing %s: %w", tmp, err)
	}
	if _, err := f.Write(b); err != nil {
		_ = f.Close()
		return fmt.Errorf("writing %s: %w", tmp, err)
	}
	if err := f.Sync(); err != nil {
		_ = f.Close()
		return fmt.Errorf("syncing %s: %w", tmp, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("closing %s: %w", tmp, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("renaming %s: %w", tmp, err)
	}
	return nil
}

// Inventory returns the GPU inventory last recorded, or nil.
func (s *State) Inventory(context.Context) (json.RawMessage, time.Time, error) {
	s.lock.RLock()
	defer s.lock.RUnlock()
	return s.inventory, s.collectedAt, nil
}

// PutInventory replaces the GPU inventory (inventory.refresh calls it).
func (s *State) PutInventory(_ context.Context, inv json.RawMessage) error {
	if !json.Valid(inv) {
		return errors.New("inventory is not valid JSON")
	}
	s.lock.Lock()
	defer s.lock.Unlock()
	doc := inventoryDoc{CollectedAt: time.Now().UTC(), Inventory: append(json.RawMessage(nil), inv...)}
	if err := writeJSON(filepath.Join(s.dir, inventoryFile), doc); err != nil {
		return err
	}
	s.inventory, s.collectedAt = doc.Inventory, doc.CollectedAt
	return nil
}

// NodeSpec returns the applied node spec generation and its JSON.
func (s *State) NodeSpec(context.Context) (int64, json.RawMessage, error) {
	s.lock.RLock()
	defer s.lock.RUnlock()
	return s.generation, s.spec, nil
}

// Generation returns the applied node spec generation.
func (s *State) Generation() int64 {
	s.lock.RLock()
	defer s.lock.RUnlock()
	return s.generation
}

// SpecChanged returns a channel that is closed when a newer spec is applied.
func (s *State) SpecChanged() <-chan struct{} {
	s.lock.RLock()
	defer s.lock.RUnlock()
	return s.specChanged
}

// ApplySpec records a node spec generation (already verified by the
// caller) and reports whether it did. A generation at or below the applied
// one changes nothing, since specs only move forward, and applied is false
// so the caller never says it applied what it dropped. Commands waiting for
// the generation are woken.
func (s *State) ApplySpec(generation int64, spec json.RawMessage) (applied bool, err error) {
	if len(spec) > 0 && !json.Valid(spec) {
		return false, errors.New("node spec is not valid JSON")
	}
	s.lock.Lock()
	defer s.lock.Unlock()
	if generation <= s.generation {
		return false, nil
	}
	doc := specDoc{Generation: generation, Spec: append(json.RawMessage(nil), spec...)}
	if err := writeJSON(filepath.Join(s.dir, specFile), doc); err != nil {
		return false, err
	}
	s.generation, s.spec = doc.Generation, doc.Spec
	close(s.specChanged)
	s.specChanged = make(chan struct{})
	return true, nil
}

// Conditions returns the node's conditions, sorted by type.
func (s *State) Conditions(context.Context) ([]kind.Condition, error) {
	s.lock.RLock()
	defer s.lock.RUnlock()
	return s.sortedConditions(), nil
}

func (s *State) sortedConditions() []kind.Condition {
	out := make([]kind.Condition, 0, len(s.conditions))
	for _, c := range s.conditions {
		out = append(out, c)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Type < out[j].Type })
	return out
}

// SetCondition sets (or with Status false, keeps as false) a condition;
// Since is set when the status changes.
func (s *State) SetCondition(c kind.Condition) error {
	s.lock.Lock()
	defer s.lock.Unlock()
	if old, ok := s.conditions[c.Type]; ok && old.Status == c.Status && c.Since.IsZero() {
		c.Since = old.Since
	}
	if c.Since.IsZero() {
		c.Since = time.Now().UTC()
	}
	s.conditions[c.Type] = c
	return writeJSON(filepath.Join(s.dir, conditionsFile), s.sortedConditions())
}

// Journal returns the most recent journal records as JSON, newest first.
func (s *State) Journal(_ context.Context, limit int) ([]json.RawMessage, error) {
	if s.journal == nil {
		return nil, nil
	}
	recs, err := s.journal.Recent(limit)
	if err != nil {
		return nil, err
	}
	out := make([]json.RawMessage, 0, len(recs))
	for _, r := range recs {
		b, err := json.Marshal(r)
		if err != nil {
			return nil, fmt.Errorf("encoding journal record %s: %w", r.ID, err)
		}
		out = append(out, b)
	}
	return out, nil
}
