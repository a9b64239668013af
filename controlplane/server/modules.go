package server

import (
	"context"
	"crypto/ed25519"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/better-compute/commands/controlplane/commands/kinds"
	"github.com/better-compute/commands/controlplane/commands/wakes"
	"github.com/better-compute/commands/controlplane/modules"
	"github.com/better-compute/commands/controlplane/modules/metal"
	"github.com/better-compute/commands/controlplane/modules/reconciler"
	"github.com/better-compute/commands/controlplane/modules/remediation"
	"github.com/better-compute/commands/controlplane/modules/rollout"
	"github.com/better-compute/commands/controlplane/server/serverconfig"
	"github.com/better-compute/commands/controlplane/trust/signing"
	"github.com/better-compute/commands/internal/trust"
)

// startModules loads the modules: every process installs their settle hook
// (whichever replica settles a command records its owner's wake) and
// registers their kinds; the modules component runs them (runModules).
func (s *Server) startModules(cfg Config, reg *kinds.Registry) error {
	ms, err := s.moduleList(cfg)
	if err != nil {
		return fmt.Errorf("modules: %w", err)
	}
	h, err := modules.NewHost(s.pool, s.queue, reg, modules.HostOptions{Logger: s.logger,
		// With the fleet's history archived, the archiver deletes River's
		// finished jobs after archiving them; River's cleaner would first.
		Wakes: wakes.Options{KeepFinishedJobs: cfg.History.RetentionDays > 0}}, ms...)
	if err != nil {
		return fmt.Errorf("modules: %w", err)
	}
	s.modules = h
	return nil
}

// moduleList is the modules this server loads: the provision module's
// remediation and the health reconciler, each when enabled, and the
// rollout module (daemon.upgrade and the pools' desired daemon versions),
// and the metal module (its kinds and the metal.power/metal.bulk workflows).
func (s *Server) moduleList(cfg Config) ([]modules.Module, error) {
	mc := cfg.Modules
	eng := remediation.Options{Quorum: s.Quorum, StaleAfter: time.Duration(mc.StaleAfter), VerifyTimeout: time.Duration(mc.VerifyTimeout),
		MaxPerWeek: mc.MaxRemediationsPerWeek}
	// Only the process that runs the modules signs with the key (a
	// gateway-only process holds no keys).
	if path := cfg.PKI.PlatformApproverKey; path != "" && cfg.Runs(ComponentModules) {
		// One approval of every platform batch: checked like the root.
		if err := signing.CheckKeyFile(path); err != nil {
			return nil, fmt.Errorf("pki.platformApproverKey: %w", err)
		}
		key, err := trust.LoadEd25519PrivateKey(path)
		if err != nil {
			return nil, fmt.Errorf("pki.platformApproverKey: %w", err)
		}
		id := trust.Ed25519KeyID(key.Public().(ed25519.PublicKey))
		for _, a := range s.Quorum().Approvers {
			if a.KeyID() == id {
				eng.PlatformKeyName = a.Name
			}
		}
		if eng.PlatformKeyName == "" {
			return nil, fmt.Errorf("pki.platformApproverKey %s (key %s) is not one of pki.approvers: add its public key there, or drop it to have people approve the platform's batches", path, id)
		}
		eng.PlatformKey = key
		s.logger.Info("the platform approves its own batches as one approval", "approver", eng.PlatformKeyName, "key_id", id)
	}
	if err := checkModuleTimes(mc); err != nil {
		return nil, err
	}
	ro := rollout.New(s.logger)
	if mc.Rollout.Interval > 0 {
		ro.Every = time.Duration(mc.Rollout.Interval)
	}
	if mc.Rollout.RejoinGrace > 0 {
		ro.RejoinGrace = time.Duration(mc.Rollout.RejoinGrace)
	}
	out := []modules.Module{ro, &metal.Module{}}
	cooldown := time.Duration(mc.Cooldown)
	if mc.Remediation.Enabled {
		out = append(out, remediation.NewProvision(remediation.ProvisionOptions{Engine: eng, Interval: time.Duration(mc.Interval), Cooldown: cooldown}))
	}
	if mc.Reconciler.Enabled {
		out = append(out, reconciler.New(reconciler.Options{Engine: eng, Interval: time.Duration(mc.Interval), Cooldown: cooldown}))
	}
	return out, nil
}

// checkModuleTimes refuses a module pass or wait that is negative, or a
// pass shorter than 100ms (it would spin on the database), naming the key;
// 0 (unset) is the default.
func checkModuleTimes(mc serverconfig.ModulesConfig) error {
	for _, d := range []struct {
		key  string
		v    serverconfig.Duration
		pass bool
	}{{"modules.interval", mc.Interval, true}, {"modules.staleAfter", mc.StaleAfter, false}, {"modules.verifyTimeout", mc.VerifyTimeout, false},
		{"modules.cooldown", mc.Cooldown, false}, {"modules.rollout.interval", mc.Rollout.Interval, true},
		{"modules.rollout.rejoinGrace", mc.Rollout.RejoinGrace, false}} {
		switch {
		case d.v < 0:
			return fmt.Errorf("%s %s: must not be negative (leave it out for the default)", d.key, time.Duration(d.v))
		case d.pass && d.v != 0 && time.Duration(d.v) < 100*time.Millisecond:
			return fmt.Errorf("%s %s: a pass must be at least 100ms", d.key, time.Duration(d.v))
		}
	}
	return nil
}

// Modules is the module host.
func (s *Server) Modules() *modules.Host { return s.modules }

// runModules runs the module host until ctx ends when this process runs the
// modules component; the channel closes once it stopped.
func (s *Server) runModules(ctx context.Context) <-chan struct{} {
	done := make(chan struct{})
	if !s.cfg.Runs(ComponentModules) {
		close(done)
		return done
	}
	go func() {
		defer close(done)
		if err := s.modules.Run(ctx); err != nil {
			s.logger.Error("modules stopped", "error", err)
		}
	}()
	return done
}

// sessionTouchEvery is how often a gateway marks the sessions it holds as
// seen (nodes.session_seen_at): the reconciler skips a node whose session
// it has not seen for a few of these.
const sessionTouchEvery = 15 * time.Second

// touch marks the sessions this gateway holds as seen, every
// sessionTouchEvery, in one statement.
func (n *nodeSessions) touch(ctx context.Context, pool *pgxpool.Pool) {
	t := time.NewTicker(sessionTouchEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		held := n.held()
		if len(held) == 0 {
			continue
		}
		if _, err := pool.Exec(ctx, `UPDATE nodes SET session_seen_at = now() WHERE id = ANY($1)`, held); err != nil && ctx.Err() == nil {
			n.logger.Debug("marking held sessions as seen", "error", err)
		}
	}
}
