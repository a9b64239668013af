package upgrade

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"time"

	"github.com/google/renameio/v2"

	"github.com/better-compute/commands/internal/fsutil"
)

// Step is how far an upgrade got.
type Step string

// The steps, in order. The plugin writes Prepared before it hands off; the
// helper writes Swapped before it restarts bcd, and Done with an Outcome.
const (
	StepPrepared Step = "prepared"
	StepSwapped  Step = "swapped"
	// StepRollingBack: the helper gave up on the new version; the rejoin
	// marker can no longer land.
	StepRollingBack Step = "rolling-back"
	StepDone        Step = "done"
)

// Outcome is how an upgrade ended.
type Outcome string

// The outcomes.
const (
	// OutcomeSucceeded: the new daemon rejoined.
	OutcomeSucceeded Outcome = "succeeded"
	// OutcomeRolledBack: the old version is active again; the target is skipped.
	OutcomeRolledBack Outcome = "rolled-back"
	// OutcomeAborted: nothing was swapped (the helper never started, or the
	// deadline passed before it could).
	OutcomeAborted Outcome = "aborted"
)

// Failure reasons an upgrade's command reports.
const (
	ReasonRolledBack  = "rolled-back"
	ReasonHandoffLost = "handoff-lost"
)

// State is the upgrade state file: the journal entry {command, from, to,
// deadline} and how far it got.
type State struct {
	CommandID string    `json:"commandId"`
	From      string    `json:"from"`
	To        string    `json:"to"`
	Deadline  time.Time `json:"deadline"`
	Step      Step      `json:"step"`
	Outcome   Outcome   `json:"outcome,omitempty"`
	// Reason and Message say why a rollback or abort happened.
	Reason  string `json:"reason,omitempty"`
	Message string `json:"message,omitempty"`
	// Tried lists what the helper did, in order, for the command's result.
	Tried []string `json:"tried,omitempty"`
	// RejoinedAt is the rejoin marker: the new daemon sets it once the
	// control plane's Welcome arrived.
	RejoinedAt time.Time `json:"rejoinedAt,omitzero"`
	UpdatedAt  time.Time `json:"updatedAt"`
}

// Done reports whether the upgrade has an outcome.
func (s State) Done() bool { return s.Outcome != "" }

// ErrNoState is returned when no upgrade was ever prepared here.
var ErrNoState = errors.New("no upgrade state")

// DecodeState reads a state file strictly.
func DecodeState(b []byte) (State, error) {
	var s State
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil {
		return s, fmt.Errorf("upgrade state: %w", err)
	}
	if s.CommandID == "" || ValidVersion(s.To) != nil || ValidVersion(s.From) != nil {
		return s, fmt.Errorf("upgrade state: command %q from %q to %q is incomplete", s.CommandID, s.From, s.To)
	}
	return s, nil
}

// ReadState reads the state file; ErrNoState when there is none.
func (l Layout) ReadState() (State, error) {
	b, err := os.ReadFile(l.StateFile())
	if errors.Is(err, os.ErrNotExist) {
		return State{}, ErrNoState
	}
	if err != nil {
		return State{}, fmt.Errorf("reading %s: %w", l.StateFile(), err)
	}
	return DecodeState(b)
}

func (l Layout) writeState(s State) error {
	s.UpdatedAt = time.Now().UTC()
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	// renameio writes a temporary file, fsyncs it and renames it over the
	// old one: a crash leaves the old state or the new, whole.
	if err := renameio.WriteFile(l.StateFile(), append(b, '\n'), 0o600); err != nil {
		return fmt.Errorf("writing %s: %w", l.StateFile(), err)
	}
	return fsutil.SyncDir(l.Root)
}

// Begin journals a new upgrade (Prepared) unless one that is not done
// holds the state file.
func (l Layout) Begin(s State) error {
	return l.Transition(func(cur *State, exists bool) error {
		if exists && !cur.Done() && cur.CommandID != s.CommandID {
			return fmt.Errorf("upgrade %s (%s to %s) has not finished", cur.CommandID, cur.From, cur.To)
		}
		s.Step, s.Outcome = StepPrepared, ""
		*cur = s
		return nil
	})
}

// Transition changes the state file under its lock: fn sees the current
// state (exists false when there is none) and changes it; an error from fn
// writes nothing.
func (l Layout) Transition(fn func(s *State, exists bool) error) error {
	release, _, err := flock(l.stateLock(), false)
	if err != nil {
		return err
	}
	defer release()
	cur, err := l.ReadState()
	exists := err == nil
	if err != nil && !errors.Is(err, ErrNoState) {
		return err
	}
	next := cur
	next.Tried = slices.Clone(cur.Tried)
	if err := fn(&next, exists); err != nil {
		return err
	}
	return l.writeState(next)
}

// MarkRejoined is the rejoin marker, written by a daemon of version v once
// Welcome arrived: it reports true when it marked the upgrade to v of
// command id as rejoined before the helper gave up on it.
func (l Layout) MarkRejoined(v string) (State, bool, error) {
	var out State
	marked := false
	err := l.Transition(func(s *State, exists bool) error {
		out = *s
		if !exists || s.To != v || s.Done() || s.Step != StepSwapped {
			return errNoChange
		}
		if s.RejoinedAt.IsZero() {
			s.RejoinedAt = time.Now().UTC()
		}
		out, marked = *s, true
		return nil
	})
	if errors.Is(err, errNoChange) {
		err = nil
	}
	return out, marked, err
}

// errNoChange leaves the state file as it is.
var errNoChange = errors.New("no change")

// NoChange is returned by a Transition's fn to write nothing.
var NoChange = errNoChange

// Skipped lists the targets that rolled back here.
func (l Layout) Skipped() ([]string, error) {
	b, err := os.ReadFile(l.SkipFile())
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", l.SkipFile(), err)
	}
	var out []string
	if err := json.Unmarshal(b, &out); err != nil {
		return nil, fmt.Errorf("%s: %w", l.SkipFile(), err)
	}
	return out, nil
}

// Skip records v as skipped: it is never installed again automatically.
func (l Layout) Skip(v string) error {
	have, err := l.Skipped()
	if err != nil {
		return err
	}
	if slices.Contains(have, v) {
		return nil
	}
	b, err := json.Marshal(append(have, v))
	if err != nil {
		return err
	}
	if err := renameio.WriteFile(l.SkipFile(), b, 0o600); err != nil {
		return fmt.Errorf("writing %s: %w", l.SkipFile(), err)
	}
	return nil
}
