package server

import (
	"context"
	"fmt"
	"time"

	"github.com/better-compute/commands/controlplane/commands/batches"
	"github.com/better-compute/commands/internal/trust"

	"github.com/better-compute/commands/controlplane/server/serverconfig"
	"github.com/better-compute/commands/controlplane/trust/signing"
	"github.com/better-compute/commands/controlplane/trust/trustbundle"
)

// The components, as the config names them.
const (
	ComponentAPI     = serverconfig.ComponentAPI
	ComponentGateway = serverconfig.ComponentGateway
	ComponentSweeper = serverconfig.ComponentSweeper
	ComponentModules = serverconfig.ComponentModules
)

// startSigning turns command signing on with pki.commandSigning: the
// authority signs every command the queue stores and every node spec, and
// the trust bundle is published (a new version when its content changed).
// Only a process running the api component reads the root: a gateway-only
// process relays what the database holds and never sees a key.
func (s *Server) startSigning(ctx context.Context, cfg Config) error {
	pc := cfg.PKI
	if pc.CommandSigning == "" {
		if len(pc.CommandSigningRoots) > 0 {
			return fmt.Errorf("pki.commandSigningRoots needs pki.commandSigning: the current root signs the bundle that carries them")
		}
		if len(pc.Approvers) > 0 {
			return fmt.Errorf("pki.approvers needs pki.commandSigning: approver keys reach the nodes in the trust bundle the root signs")
		}
		return nil
	}
	if !cfg.Runs(ComponentAPI) {
		s.logger.Info("pki.commandSigning is not read: this process runs no api component; the gateway relays the signed commands and bundle the api stored", "components", cfg.Components)
		return nil
	}
	if pc.CreateCommandSigning {
		if err := s.createRootIfMissing(ctx, pc.CommandSigning); err != nil {
			return err
		}
	}
	return s.applyPKI(ctx, pc, "command signing on")
}

// Signer is the command-signing authority, nil when commands go unsigned.
func (s *Server) Signer() *signing.Authority { return s.signer.Load() }

// ReloadPKI applies changed pki settings on SIGHUP: a new signing root (a
// rotation's switch), rotation roots or approvers publish a new trust
// bundle version, and commands are signed with the new root from then on.
// A process started without pki.commandSigning cannot turn it on here
// (restart it); a bad setting changes nothing and is returned.
func (s *Server) ReloadPKI(ctx context.Context, pc serverconfig.PKIConfig) error {
	if s.signer.Load() == nil {
		if pc.CommandSigning != "" {
			return fmt.Errorf("pki.commandSigning was set after start: restart bc-server to turn command signing on")
		}
		return nil
	}
	if pc.CommandSigning == "" {
		return fmt.Errorf("pki.commandSigning was removed: nodes that hold the trust bundle refuse unsigned commands; keep signing (see the operator guide on turning signing off)")
	}
	if err := s.applyPKI(ctx, pc, "pki reloaded"); err != nil {
		return err
	}
	s.trust.Invalidate()
	return nil
}

// applyPKI loads the root, builds the bundle's content, publishes it (a new
// version only when the content changed) and signs with the root from then
// on. Nothing changes when any step fails.
func (s *Server) applyPKI(ctx context.Context, pc serverconfig.PKIConfig, what string) error {
	if err := signing.CheckKeyFile(pc.CommandSigning); err != nil {
		return fmt.Errorf("pki.commandSigning: %w", err)
	}
	a, err := signing.Load(pc.CommandSigning, signing.Options{Lifetime: time.Duration(pc.WorkerKeyLifetime), Logger: s.logger})
	if err != nil {
		return err
	}
	content, err := trustbundle.Content(bundleSettings(pc), a.RootPublic())
	if err != nil {
		return err
	}
	tb, err := trustbundle.Publish(ctx, s.pool, content, a, pc.TrustVersion, time.Now())
	if err != nil {
		return fmt.Errorf("publishing the trust bundle: %w", err)
	}
	s.signer.Store(a)
	s.queue.SetSigner(a)
	s.setQuorum(content)
	s.logger.Info(what, "trust_version", tb.GetVersion(), "roots", len(content.Roots), "approvers", len(content.Approvers))
	return nil
}

// setQuorum takes the approver keys and threshold of the bundle content: the
// API checks approvals against them, and with keys and no break-glass
// allowance a destructive kind needs a batch (batch-required).
func (s *Server) setQuorum(content trust.Bundle) {
	q := batches.Quorum{Approvers: content.Approvers, Threshold: content.ApprovalThreshold}
	s.quorum.Store(&q)
	if q.On() && content.UnbatchedDestructivePerHour == 0 {
		s.queue.RequireBatches(true)
	}
}

// Quorum is the destructive-batch quorum in force (no keys: audit only).
func (s *Server) Quorum() batches.Quorum {
	if q := s.quorum.Load(); q != nil {
		return *q
	}
	return batches.Quorum{}
}

// bundleSettings is the part of the pki section that the trust bundle
// carries, in trustbundle's own type.
func bundleSettings(pc serverconfig.PKIConfig) trustbundle.Settings {
	s := trustbundle.Settings{
		CommandSigningRoots:         pc.CommandSigningRoots,
		ReleaseKeys:                 pc.ReleaseKeys,
		ApprovalThreshold:           pc.ApprovalThreshold,
		UnbatchedDestructivePerHour: pc.UnbatchedDestructivePerHour,
	}
	for _, a := range pc.Approvers {
		s.Approvers = append(s.Approvers, trustbundle.Approver{Name: a.Name, PublicKey: a.PublicKey})
	}
	return s
}
