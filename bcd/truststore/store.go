// Package truststore is bcd's trust bundle: the command-signing roots, the
// approver keys and the allowance it verifies commands and specs against,
// persisted in the state directory (trust.json, the signed bytes as
// received) with the highest version it accepted. A bundle arrives at join
// (trusted as the join answer, and it must be signed by its own roots), or
// from an anchor the operator placed (trustAnchors); after that a new
// version is taken only when a root the node already trusts signed it, and a
// lower version is refused. The gateway cannot swap in its own roots.
//
// A node with trust anchors is never open: until it holds a bundle, its
// commands and node specs verify against the anchors themselves (Verifying),
// and a join answer's bundle must be signed by an anchor. So a gateway that
// withholds the bundle, or offers one no anchor signed, gains nothing.
package truststore

import (
	"crypto/ed25519"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/google/renameio/v2"
	"github.com/hashicorp/go-hclog"

	"github.com/better-compute/commands/internal/trust"
)

// FileName is the bundle's file in the state directory.
const FileName = "trust.json"

// Store is the node's accepted trust bundle.
type Store struct {
	path    string
	anchors []trust.Root
	logger  hclog.Logger

	// lock guards bundle, signed and verifying, which change when a new
	// version is accepted.
	lock   sync.RWMutex
	bundle *trust.Bundle
	signed trust.Signed
	// verifying is what commands and specs verify against (Verifying): the
	// bundle, or the anchors where the bundle names no root. It changes
	// only with the bundle, so a trust.WorkerCache keyed on it holds.
	verifying *trust.Bundle
}

// ErrNoBundle is returned by Offer when the node has no bundle and no
// anchor verifies the one offered: the first bundle comes at join.
var ErrNoBundle = errors.New("this node has no trust bundle yet and no trust anchor verifies the one offered; it takes its first bundle at join (bcd join) or from trustAnchors")

// Open reads the bundle in stateDir, if any. anchors are root public keys
// the operator configured (trustAnchors): a bundle they sign is accepted
// even as the first one.
func Open(stateDir string, anchors []ed25519.PublicKey, logger hclog.Logger) (*Store, error) {
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	s := &Store{path: filepath.Join(stateDir, FileName), logger: logger.Named("trust")}
	for _, a := range anchors {
		s.anchors = append(s.anchors, trust.Root{PublicKey: a})
	}
	s.verifying = s.verifyingFor(nil)
	b, err := os.ReadFile(s.path)
	if errors.Is(err, os.ErrNotExist) {
		return s, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading the trust bundle: %w", err)
	}
	// The file is the node's own record; it was verified when accepted.
	// Decode it strictly and check it is signed by its own roots, so a
	// corrupted or hand-edited file is an error, never a silent downgrade.
	bd, sg, err := trust.VerifyBundle(b, nil, time.Now())
	if err != nil && !errors.Is(err, trust.ErrExpired) {
		return nil, fmt.Errorf("trust bundle %s: %w (restore it, or rejoin the node)", s.path, err)
	}
	s.bundle, s.signed = &bd, sg
	s.verifying = s.verifyingFor(s.bundle)
	return s, nil
}

// verifyingFor is what commands verify against while b is held: b itself
// when it names a command-signing root or the node has no anchors, and
// otherwise b with the anchors as its roots (a version-0 bundle of the
// anchors alone when b is nil), so that holding anchors always means that
// commands must be signed.
func (s *Store) verifyingFor(b *trust.Bundle) *trust.Bundle {
	if len(s.anchors) == 0 || b.HasRoots() {
		return b
	}
	v := trust.Bundle{Roots: s.anchors}
	if b != nil {
		v = *b
		v.Roots = s.anchors
	}
	return &v
}

// Bundle is the accepted bundle, nil when there is none.
func (s *Store) Bundle() *trust.Bundle {
	s.lock.RLock()
	defer s.lock.RUnlock()
	return s.bundle
}

// Version is the accepted version, 0 when there is none.
func (s *Store) Version() int64 {
	if b := s.Bundle(); b != nil {
		return b.Version
	}
	return 0
}

// Verifying is the bundle commands and node specs verify against: the
// accepted bundle; on a node with trust anchors, before it holds one (or
// while the one it holds names no command-signing root), the anchors as the
// roots of a bundle of version 0. nil when there is neither: commands go
// unsigned.
func (s *Store) Verifying() *trust.Bundle {
	s.lock.RLock()
	defer s.lock.RUnlock()
	return s.verifying
}

// Anchored reports whether the operator configured trust anchors: then
// commands must be signed from the node's first session on.
func (s *Store) Anchored() bool { return len(s.anchors) > 0 }

// HasCommandSigningRoots reports whether commands must be signed: the
// bundle holds command-signing roots, or the node has trust anchors.
func (s *Store) HasCommandSigningRoots() bool { return s.Verifying().HasRoots() }

// AcceptJoin takes the bundle of a join answer: it must be signed by its own
// roots and not lower than the version already held. On a node with trust
// anchors it must be signed by an anchor: the join answer comes through the
// gateway, which must not be able to choose the roots of an anchored node.
func (s *Store) AcceptJoin(wire []byte, now time.Time) error {
	bd, sg, err := trust.VerifyBundle(wire, s.anchors, now)
	if err != nil && len(s.anchors) > 0 {
		return fmt.Errorf("join answer's trust bundle is not signed by a trust anchor (trustAnchors; after a root rotation, add the new root's public key there): %w", err)
	}
	if err != nil {
		return fmt.Errorf("join answer's trust bundle: %w", err)
	}
	s.lock.Lock()
	defer s.lock.Unlock()
	if s.bundle != nil && bd.Version < s.bundle.Version {
		return fmt.Errorf("join answer's trust bundle: %w: offered %d, accepted %d", trust.ErrBundleRollback, bd.Version, s.bundle.Version)
	}
	return s.keep(bd, sg, wire)
}

// Offer takes a bundle a Welcome carries. It returns whether the bundle is
// new; an error says why it was refused (a rollback, a conflict, a bundle
// no trusted root signed), and the node keeps the one it has.
func (s *Store) Offer(wire []byte, now time.Time) (bool, error) {
	s.lock.Lock()
	defer s.lock.Unlock()
	if s.bundle == nil {
		if len(s.anchors) == 0 {
			return false, ErrNoBundle
		}
		bd, sg, err := trust.VerifyBundle(wire, s.anchors, now)
		if err != nil {
			return false, fmt.Errorf("trust bundle not signed by a trust anchor: %w", err)
		}
		return true, s.keep(bd, sg, wire)
	}
	// The held bundle's roots sign its successor; anchors stand in for
	// roots it does not name.
	bd, sg, changed, err := trust.VerifyUpdate(*s.verifying, s.signed, wire, now)
	if err != nil || !changed {
		return false, err
	}
	return true, s.keep(bd, sg, wire)
}

// keep persists wire (synced, atomically replacing the file) and makes it
// the accepted bundle. The caller holds lock.
func (s *Store) keep(bd trust.Bundle, sg trust.Signed, wire []byte) error {
	if err := os.MkdirAll(filepath.Dir(s.path), 0o700); err != nil {
		return fmt.Errorf("trust bundle: %w", err)
	}
	if err := renameio.WriteFile(s.path, wire, 0o600); err != nil {
		return fmt.Errorf("persisting the trust bundle: %w", err)
	}
	old := int64(0)
	if s.bundle != nil {
		old = s.bundle.Version
	}
	s.bundle, s.signed = &bd, sg
	s.verifying = s.verifyingFor(s.bundle)
	s.logger.Info("trust bundle accepted", "version", bd.Version, "previous_version", old, "roots", len(bd.Roots), "approvers", len(bd.Approvers))
	return nil
}
