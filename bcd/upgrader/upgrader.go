// Package upgrader is bcd-upgrader: the part of daemon.upgrade that runs in a
// transient systemd unit of its own, outside bcd's cgroup, so restarting
// bcd cannot kill it. It takes over an upgrade the plugin journaled as
// prepared: it activates the new version (an atomic symlink swap), restarts
// bcd and waits for the new daemon's rejoin marker until the deadline.
// Without it, it activates the old version again, records the target as
// skipped and restarts bcd, which then reports the command failed with
// what was tried. The old version's files are kept until the new one
// rejoined; older versions are removed then.
package upgrader

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	sdbus "github.com/coreos/go-systemd/v22/dbus"
	"github.com/godbus/dbus/v5"
	"github.com/hashicorp/go-hclog"

	"github.com/better-compute/commands/internal/testhook"
	"github.com/better-compute/commands/internal/upgrade"
)

// Config is one helper run.
type Config struct {
	Layout upgrade.Layout
	// Unit is bcd's unit (bcd.service).
	Unit string
	// Connect reaches systemd.
	Connect func(ctx context.Context) (*sdbus.Conn, error)
	// Poll is how often the state file is read for the rejoin marker (250 ms).
	Poll   time.Duration
	Logger hclog.Logger
	// Now is the clock; time.Now when nil.
	Now func() time.Time
}

// ErrNothingToDo is returned when no prepared upgrade waits for a helper.
var ErrNothingToDo = errors.New("no prepared upgrade")

// Run carries the prepared upgrade to its outcome.
func Run(ctx context.Context, cfg Config) (upgrade.State, error) {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Poll <= 0 {
		cfg.Poll = 250 * time.Millisecond
	}
	log := cfg.Logger
	if log == nil {
		log = hclog.NewNullLogger()
	}
	l := cfg.Layout
	release, ok, err := l.HoldHelper()
	if err != nil {
		return upgrade.State{}, err
	}
	if !ok {
		return upgrade.State{}, errors.New("another bcd-upgrader holds the install directory")
	}
	defer release()

	// Claim the prepared upgrade: prepared -> swapped, or abort it when
	// its deadline passed before the helper got to it.
	var st upgrade.State
	err = l.Transition(func(s *upgrade.State, exists bool) error {
		if !exists || s.Done() || s.Step != upgrade.StepPrepared {
			st = *s
			return ErrNothingToDo
		}
		if !cfg.Now().Before(s.Deadline) {
			s.Step, s.Outcome, s.Reason = upgrade.StepDone, upgrade.OutcomeAborted, upgrade.ReasonHandoffLost
			s.Message = "the helper started after the deadline; nothing was activated"
			st = *s
			return nil
		}
		s.Step = upgrade.StepSwapped
		s.Tried = append(s.Tried, "activated "+s.To)
		st = *s
		return nil
	})
	if err != nil || st.Done() {
		return st, err
	}
	log = log.With("command_id", st.CommandID, "from", st.From, "to", st.To)
	if err := l.Activate(st.To); err != nil {
		return rollback(ctx, cfg, log, st, fmt.Errorf("activating %s: %w", st.To, err))
	}
	log.Info("activated the new version; restarting bcd")
	testhook.Hold("swapped")
	if err := restart(ctx, cfg); err != nil {
		return rollback(ctx, cfg, log, st, fmt.Errorf("restarting %s on %s: %w", cfg.Unit, st.To, err))
	}
	// Wait for the rejoin marker until the deadline.
	t := time.NewTicker(cfg.Poll)
	defer t.Stop()
	for {
		cur, err := l.ReadState()
		if err == nil && cur.CommandID == st.CommandID && !cur.RejoinedAt.IsZero() {
			return succeed(cfg, log, cur)
		}
		if !cfg.Now().Before(st.Deadline) {
			break
		}
		select {
		case <-ctx.Done():
			// Stopped (systemctl stop of the unit): leave the state for
			// the daemon, which finishes an upgrade whose helper is gone.
			return cur, ctx.Err()
		case <-t.C:
		}
	}
	return rollback(ctx, cfg, log, st, fmt.Errorf("%s did not rejoin the control plane by %s", st.To, st.Deadline.Format(time.RFC3339)))
}

func succeed(cfg Config, log hclog.Logger, st upgrade.State) (upgrade.State, error) {
	var out upgrade.State
	err := cfg.Layout.Transition(func(s *upgrade.State, _ bool) error {
		if s.CommandID != st.CommandID || s.Done() {
			out = *s
			return upgrade.NoChange
		}
		s.Step, s.Outcome = upgrade.StepDone, upgrade.OutcomeSucceeded
		s.Tried = append(s.Tried, st.To+" rejoined")
		out = *s
		return nil
	})
	if errors.Is(err, upgrade.NoChange) {
		err = nil
	}
	if err != nil {
		return out, err
	}
	log.Info("the new daemon rejoined; the upgrade succeeded")
	// The backup (the version before) stays for a manual rollback; older
	// versions are removed now that the new one rejoined.
	prune(cfg.Layout, st.To, st.From)
	return out, nil
}

// rollback decides the rollback under the state lock, so the rejoin marker
// cannot land after it: a daemon that rejoined in time wins.
func rollback(ctx context.Context, cfg Config, log hclog.Logger, st upgrade.State, why error) (upgrade.State, error) {
	l := cfg.Layout
	rejoined := false
	err := l.Transition(func(s *upgrade.State, _ bool) error {
		if s.CommandID != st.CommandID || s.Done() {
			return upgrade.NoChange
		}
		if !s.RejoinedAt.IsZero() {
			rejoined = true
			return upgrade.NoChange
		}
		s.Step = upgrade.StepRollingBack
		s.Tried = append(s.Tried, "gave up: "+why.Error())
		return nil
	})
	if rejoined {
		cur, _ := l.ReadState()
		return succeed(cfg, log, cur)
	}
	if err != nil && !errors.Is(err, upgrade.NoChange) {
		return st, err
	}
	log.Warn("rolling back", "why", why)
	if err := l.Activate(st.From); err != nil {
		return st, fmt.Errorf("rolling back to %s: %w", st.From, err)
	}
	if err := l.Skip(st.To); err != nil {
		log.Error("recording the skipped target", "error", err)
	}
	var out upgrade.State
	err = l.Transition(func(s *upgrade.State, _ bool) error {
		s.Step, s.Outcome, s.Reason = upgrade.StepDone, upgrade.OutcomeRolledBack, upgrade.ReasonRolledBack
		s.Message = fmt.Sprintf("rolled back from %s to %s: %v; %s is skipped", st.To, st.From, why, st.To)
		s.Tried = append(s.Tried, "activated "+st.From+" again", "skipped "+st.To, "restarted "+cfg.Unit)
		out = *s
		return nil
	})
	if err != nil {
		return out, err
	}
	if err := restart(ctx, cfg); err != nil {
		return out, fmt.Errorf("restarting %s on %s after the rollback: %w", cfg.Unit, st.From, err)
	}
	_ = os.RemoveAll(l.VersionDir(st.To))
	return out, nil
}

// restart clears the unit's start-limit counter and restarts it, waiting
// for systemd's job.
func restart(ctx context.Context, cfg Config) error {
	conn, err := cfg.Connect(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	// A restart counts against StartLimitBurst; a helper that restarts
	// twice (swap, rollback) must not find the unit refused.
	_ = conn.ResetFailedUnitContext(ctx, cfg.Unit)
	done := make(chan string, 1)
	if _, err := conn.RestartUnitContext(ctx, cfg.Unit, "replace", done); err != nil {
		return err
	}
	select {
	case res := <-done:
		if res != "done" {
			return fmt.Errorf("systemd's restart job ended %q", res)
		}
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func prune(l upgrade.Layout, keep ...string) {
	entries, err := os.ReadDir(l.Versions())
	if err != nil {
		return
	}
	for _, e := range entries {
		name := e.Name()
		if !e.IsDir() || name[0] == '.' {
			continue
		}
		kept := false
		for _, k := range keep {
			kept = kept || k == name
		}
		if !kept {
			_ = os.RemoveAll(l.VersionDir(name))
		}
	}
}

// Connect opens go-systemd's connection to systemd on the system bus, or
// on addr when it is set (tests: a private dbus-daemon).
func Connect(ctx context.Context, addr string) (*sdbus.Conn, error) {
	if addr == "" {
		c, err := sdbus.NewSystemConnectionContext(ctx)
		if err != nil {
			return nil, fmt.Errorf("connecting to systemd on the system bus: %w", err)
		}
		return c, nil
	}
	c, err := sdbus.NewConnection(func() (*dbus.Conn, error) { return dbus.Connect(addr, dbus.WithContext(ctx)) })
	if err != nil {
		return nil, fmt.Errorf("connecting to systemd at %s: %w", addr, err)
	}
	return c, nil
}
