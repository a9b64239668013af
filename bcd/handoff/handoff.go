// Package handoff settles daemon.upgrade commands in the daemon that a
// restart brought up. The plugin hands the upgrade to bcd-upgrader and
// reports success, which only says the handoff happened; the command stays
// unfinished in the journal until a daemon reads the upgrade state file
// (internal/upgrade) after the restart: the new version writes the rejoin
// marker once the control plane's Welcome arrives and settles the command
// as succeeded, and the old version, restarted by a rollback, settles it as
// failed with the reason and what the helper tried. A command is never run
// again after the handoff.
package handoff

import (
	"encoding/json"
	"errors"
	"sync"

	"github.com/hashicorp/go-hclog"

	"github.com/better-compute/commands/bcd/daemon"
	"github.com/better-compute/commands/bcd/journal"
	"github.com/better-compute/commands/internal/testhook"
	"github.com/better-compute/commands/internal/upgrade"
)

// Result is daemon.upgrade's result document once settled.
type Result struct {
	// From and To are the versions of the upgrade.
	From string `json:"from"`
	To   string `json:"to"`
	// Running is the version of the daemon that settled it.
	Running string `json:"running"`
	// Outcome is the state file's outcome ("succeeded", "rolled-back", "aborted").
	Outcome upgrade.Outcome `json:"outcome,omitempty"`
	// Tried lists what the helper did, in order.
	Tried []string `json:"tried,omitempty"`
}

// Upgrades is the daemon's Handoff for daemon.upgrade.
type Upgrades struct {
	// Layout is the install directory.
	Layout upgrade.Layout
	// Version is this daemon's version.
	Version string
	// NeverRejoin is a test hook (internal/testhook "never-rejoin"): the
	// daemon never writes the rejoin marker, as a build that starts but
	// cannot talk to the control plane would.
	NeverRejoin bool
	Logger      hclog.Logger

	// lock guards pending: commands left unfinished at Recover.
	lock    sync.Mutex
	pending map[string]bool
}

var _ daemon.Handoff = (*Upgrades)(nil)

// Handles reports whether kind is daemon.upgrade.
func (u *Upgrades) Handles(kind string) bool { return kind == upgrade.KindName }

func (u *Upgrades) logger() hclog.Logger {
	if u.Logger == nil {
		return hclog.NewNullLogger()
	}
	return u.Logger.Named("handoff")
}

func (u *Upgrades) outcome(s upgrade.State) daemon.HandoffOutcome {
	res, _ := json.Marshal(Result{From: s.From, To: s.To, Running: u.Version, Outcome: s.Outcome, Tried: s.Tried})
	switch s.Outcome {
	case upgrade.OutcomeSucceeded:
		return daemon.HandoffOutcome{State: journal.StateSucceeded, Message: "upgraded from " + s.From + " to " + s.To + "; the new daemon rejoined", Result: res}
	case upgrade.OutcomeRolledBack:
		return daemon.HandoffOutcome{State: journal.StateFailed, Reason: upgrade.ReasonRolledBack, Message: s.Message, Result: res}
	}
	reason := s.Reason
	if reason == "" {
		reason = upgrade.ReasonHandoffLost
	}
	return daemon.HandoffOutcome{State: journal.StateFailed, Reason: reason, Message: s.Message, Result: res}
}

// Recovered settles what the state file proves about rec: a done upgrade
// settles as its outcome; one still in the helper's hands, or one whose
// new daemon (this one) has not rejoined yet, stays pending; one whose
// helper is gone is finished here.
func (u *Upgrades) Recovered(rec journal.Record) (daemon.HandoffOutcome, bool) {
	log := u.logger().With("command_id", rec.ID)
	st, err := u.Layout.ReadState()
	if err != nil || st.CommandID != rec.ID {
		if err != nil && !errors.Is(err, upgrade.ErrNoState) {
			log.Error("reading the upgrade state", "error", err)
		}
		// The plugin never journaled the handoff: bcd stopped while it
		// downloaded, staged or checked; nothing was activated.
		return daemon.HandoffOutcome{State: journal.StateFailed, Reason: journal.ReasonInterrupted,
			Message: "bcd stopped before the upgrade was handed off; nothing was activated, " + u.Version + " runs"}, false
	}
	if st.Done() {
		return u.outcome(st), false
	}
	running, err := u.Layout.HelperRunning()
	if err != nil {
		log.Error("checking for the upgrade helper", "error", err)
	}
	if running || err != nil || st.To == u.Version {
		// The helper decides, or this new daemon must first rejoin.
		u.lock.Lock()
		if u.pending == nil {
			u.pending = map[string]bool{}
		}
		u.pending[rec.ID] = true
		u.lock.Unlock()
		return daemon.HandoffOutcome{}, true
	}
	// The helper is gone and this is the old version: finish the upgrade
	// as not done, with the old version active.
	var final upgrade.State
	err = u.Layout.Transition(func(s *upgrade.State, exists bool) error {
		if !exists || s.CommandID != rec.ID || s.Done() {
			final = *s
			return upgrade.NoChange
		}
		if cur, _ := u.Layout.CurrentVersion(); cur != u.Version {
			if err := u.Layout.Activate(u.Version); err != nil {
				return err
			}
			s.Tried = append(s.Tried, "activated "+u.Version+" again (the helper was gone)")
		}
		s.Step, s.Outcome, s.Reason = upgrade.StepDone, upgrade.OutcomeAborted, upgrade.ReasonHandoffLost
		s.Message = "the upgrade helper stopped before " + s.To + " rejoined; " + u.Version + " runs"
		final = *s
		return nil
	})
	if err != nil && !errors.Is(err, upgrade.NoChange) {
		log.Error("finishing the abandoned upgrade", "error", err)
	}
	return u.outcome(final), false
}

// Rejoined is called once the control plane's Welcome arrived: for each
// pending upgrade to this version it writes the rejoin marker and settles
// the command as succeeded. With the helper gone, it also finishes the
// state file itself.
func (u *Upgrades) Rejoined(d *daemon.Daemon) {
	if u.NeverRejoin {
		u.logger().Warn("test hook never-rejoin: the rejoin marker is not written")
		return
	}
	testhook.Hold("before-rejoin")
	u.lock.Lock()
	ids := make([]string, 0, len(u.pending))
	for id := range u.pending {
		ids = append(ids, id)
	}
	u.lock.Unlock()
	for _, id := range ids {
		log := u.logger().With("command_id", id)
		st, marked, err := u.Layout.MarkRejoined(u.Version)
		if err != nil {
			log.Error("writing the rejoin marker", "error", err)
			continue
		}
		if !marked || st.CommandID != id {
			continue
		}
		if running, _ := u.Layout.HelperRunning(); !running {
			_ = u.Layout.Transition(func(s *upgrade.State, _ bool) error {
				if s.CommandID != id || s.Done() {
					return upgrade.NoChange
				}
				s.Step, s.Outcome = upgrade.StepDone, upgrade.OutcomeSucceeded
				return nil
			})
		}
		st.Outcome = upgrade.OutcomeSucceeded
		if _, err := d.SettleHandoff(id, u.outcome(st)); err != nil {
			log.Error("settling the upgrade", "error", err)
			continue
		}
		log.Info("rejoined after the upgrade", "from", st.From, "to", st.To)
		u.lock.Lock()
		delete(u.pending, id)
		u.lock.Unlock()
	}
}
