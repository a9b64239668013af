// Package trustbundle publishes the trust bundle nodes verify commands
// against and serves it to the gateway and the join endpoint. The process
// that holds the command-signing root builds the bundle from pki (the
// current root, the rotation's other roots, the approver keys and the
// allowance), and stores a new version, signed, when the content changes:
// the version follows the content and never goes below pki.trustVersion.
// Gateways read the newest stored version and relay it as signed, so they
// need no key.
package trustbundle

import (
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/better-compute/commands/controlplane/internal/store"
	"github.com/better-compute/commands/controlplane/trust/signing"
	"github.com/better-compute/commands/internal/trust"
	agentv1 "github.com/better-compute/commands/proto/bc/agent/v1"
)

// publishLockKey serialises publishers (replicas starting together).
const publishLockKey = 0x62635f7472757374 // "bc_trust"

// Settings are what a trust bundle is built from: the part of bc-server's
// pki configuration that nodes are told. They are trust's own type, so the
// trust room does not link the server's configuration (the server fills
// them from its pki section; the error messages name those keys).
type Settings struct {
	// CommandSigningRoots are more roots' public keys (PEM files) carried
	// during a rotation (pki.commandSigningRoots).
	CommandSigningRoots []string
	// ReleaseKeys are bcd release keys' public keys (pki.releaseKeys).
	ReleaseKeys []string
	// Approvers are the destructive-batch approvers (pki.approvers).
	Approvers []Approver
	// ApprovalThreshold is how many approvers a batch needs, all when 0.
	ApprovalThreshold int
	// UnbatchedDestructivePerHour is the break-glass allowance.
	UnbatchedDestructivePerHour int
}

// Approver is one approver: who, and the public key file (PEM).
type Approver struct {
	Name      string
	PublicKey string
}

// Content builds the bundle's content from the pki settings: the signing
// root first, then the rotation's roots, the approvers, the threshold (all
// approvers when 0) and the allowance. Version and IssuedAt are left for
// Publish.
func Content(cfg Settings, root ed25519.PublicKey) (trust.Bundle, error) {
	b := trust.Bundle{Roots: []trust.Root{{PublicKey: root}}}
	seen := map[string]bool{trust.Ed25519KeyID(root): true}
	for _, p := range cfg.CommandSigningRoots {
		k, err := trust.LoadEd25519PublicKey(p)
		if err != nil {
			return b, fmt.Errorf("pki.commandSigningRoots: %w", err)
		}
		if id := trust.Ed25519KeyID(k); !seen[id] {
			seen[id] = true
			b.Roots = append(b.Roots, trust.Root{PublicKey: k})
		}
	}
	releases := map[string]bool{}
	for _, p := range cfg.ReleaseKeys {
		k, err := trust.LoadEd25519PublicKey(p)
		if err != nil {
			return b, fmt.Errorf("pki.releaseKeys: %w", err)
		}
		if id := trust.Ed25519KeyID(k); !releases[id] {
			releases[id] = true
			b.ReleaseKeys = append(b.ReleaseKeys, trust.Root{PublicKey: k})
		}
	}
	approvers := map[string]bool{}
	for i, a := range cfg.Approvers {
		k, err := trust.LoadEd25519PublicKey(a.PublicKey)
		if err != nil {
			return b, fmt.Errorf("pki.approvers[%d] (%s): %w", i, a.Name, err)
		}
		id := trust.Ed25519KeyID(k)
		if approvers[id] {
			return b, fmt.Errorf("pki.approvers[%d] (%s): the same key is listed twice; a key counts once", i, a.Name)
		}
		approvers[id] = true
		b.Approvers = append(b.Approvers, trust.Approver{Name: a.Name, PublicKey: k})
	}
	b.ApprovalThreshold = cfg.ApprovalThreshold
	if b.ApprovalThreshold == 0 {
		b.ApprovalThreshold = len(b.Approvers)
	}
	if b.ApprovalThreshold < 0 || b.ApprovalThreshold > len(b.Approvers) {
		return b, fmt.Errorf("pki.approvalThreshold %d with %d approvers", cfg.ApprovalThreshold, len(b.Approvers))
	}
	if cfg.UnbatchedDestructivePerHour < 0 {
		return b, fmt.Errorf("pki.unbatchedDestructivePerHour %d: must be 0 or more", cfg.UnbatchedDestructivePerHour)
	}
	b.UnbatchedDestructivePerHour = cfg.UnbatchedDestructivePerHour
	return b, nil
}

// contentDigest is the SHA-256 of what the bundle says, without its
// version and issue time.
func contentDigest(b trust.Bundle) ([]byte, error) {
	b.Version, b.IssuedAt = 0, time.Time{}
	j, err := json.Marshal(b)
	if err != nil {
		return nil, fmt.Errorf("encoding bundle content: %w", err)
	}
	s := sha256.Sum256(j)
	return s[:], nil
}

// Publish stores content as the newest bundle unless the newest stored one
// already says the same: the new version is one above the newest, and at
// least minVersion. It returns the bundle nodes get.
func Publish(ctx context.Context, pool *pgxpool.Pool, content trust.Bundle, a *signing.Authority, minVersion int64, now time.Time) (*agentv1.TrustBundle, error) {
	digest, err := contentDigest(content)
	if err != nil {
		return nil, err
	}
	var out *agentv1.TrustBundle
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, int64(publishLockKey)); err != nil {
			return fmt.Errorf("locking trust bundles: %w", err)
		}
		var version int64
		var have []byte
		var signed []byte
		err := tx.QueryRow(ctx, `SELECT version, content_sha256, signed FROM trust_bundles ORDER BY version DESC LIMIT 1`).Scan(&version, &have, &signed)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
		case err != nil:
			return fmt.Errorf("reading the newest trust bundle: %w", err)
		case string(have) == string(digest) && version >= minVersion:
			out = &agentv1.TrustBundle{Version: version, Signed: signed}
			return nil
		}
		content.Version = max(version+1, minVersion, 1)
		content.IssuedAt = now.UTC().Truncate(time.Second)
		wire, err := a.SignBundle(content)
		if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `INSERT INTO trust_bundles (version, content_sha256, signed) VALUES ($1, $2, $3)`, content.Version, digest, wire); err != nil {
			return fmt.Errorf("storing trust bundle %d: %w", content.Version, err)
		}
		out = &agentv1.TrustBundle{Version: content.Version, Signed: wire}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// Latest is the newest stored bundle, nil when none was published (commands
// go unsigned).
func Latest(ctx context.Context, db store.DBTX) (*agentv1.TrustBundle, error) {
	var tb agentv1.TrustBundle
	err := db.QueryRow(ctx, `SELECT version, signed FROM trust_bundles ORDER BY version DESC LIMIT 1`).Scan(&tb.Version, &tb.Signed)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading the trust bundle: %w", err)
	}
	return &tb, nil
}
