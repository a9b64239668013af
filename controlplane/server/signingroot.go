package server

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/better-compute/commands/controlplane/trust/signing"
	"github.com/better-compute/commands/controlplane/trust/trustbundle"
)

// createRootIfMissing is pki.createCommandSigning: the packaged config's
// first start makes the command-signing authority on the control plane
// host, as the user bc-server runs as, so that a fresh install signs from
// its first command. It is done here rather than in the package's
// postinst because a postinst runs before the admin edited the config
// (database, paths, or signing off), and in image builds, where a key made
// at install would be shared by every host cloned from the image.
//
// It never makes a second root: when path exists it does nothing (the
// mode and owner are checked by applyPKI); when path is missing but its
// .pub is there, or a trust bundle is already published, nodes trust a
// root that is not here, and bc-server refuses to start with what to do.
func (s *Server) createRootIfMissing(ctx context.Context, path string) error {
	if _, err := os.Stat(path); err == nil {
		return nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("pki.commandSigning: %w", err)
	}
	if _, err := os.Stat(path + ".pub"); err == nil {
		return fmt.Errorf("pki.commandSigning: %s does not exist but its public key %s.pub does: the root was moved off this host; put it back (mode 0600, owned by the user bc-server runs as) for bc-server to sign, since pki.createCommandSigning never replaces a root that nodes may trust", path, path)
	}
	tb, err := trustbundle.Latest(ctx, s.pool)
	if err != nil {
		return fmt.Errorf("pki.createCommandSigning: %w", err)
	}
	if tb != nil {
		return fmt.Errorf("pki.commandSigning: %s does not exist, and trust bundle version %d is already published: nodes trust the root that signed it, so pki.createCommandSigning makes no new one; copy that root here (mode 0600, owned by the user bc-server runs as), or turn pki.createCommandSigning off and follow docs/trust.md to rotate", path, tb.GetVersion())
	}
	id, err := signing.CreateRoot(path)
	if errors.Is(err, signing.ErrKeyExists) {
		return nil // another process on this host made it first
	}
	if err != nil {
		return fmt.Errorf("pki.createCommandSigning: %w", err)
	}
	s.logger.Info("created the command-signing root (pki.createCommandSigning)", "key_id", id, "private_key", path, "public_key", path+".pub")
	s.logger.Warn(offlineCopyAdvice(path))
	return nil
}

// offlineCopyAdvice is what bc-server says once it made the root: which
// file to copy offline, what stays on the host and why, and what the nodes
// get. bc-server certifies its own 24-hour worker keys with the root (in
// memory, renewed every 12 hours) and signs the trust bundle with it, so
// the root stays on this host while bc-server signs; the offline copy is
// what survives the host.
func offlineCopyAdvice(path string) string {
	return fmt.Sprintf(`the command-signing root was created on this host; keep an offline copy now:
  copy %[1]s (the private key, 0600) and %[1]s.pub to offline storage (an encrypted USB key in a safe); they are the only copies,
  and without the root every node must be rejoined or given a new trust anchor;
  %[1]s stays on this host, readable by bc-server only: bc-server certifies its own 24-hour worker keys with it (in memory, renewed every 12 hours, never written to disk) and signs the trust bundle;
  give nodes %[1]s.pub as trustAnchors (bcd.yaml), and never copy %[1]s to a gateway host (--components gateway reads no key);
  the operator guide's "Command signing at first start" says the same`, path)
}
