// Package nodecerts records every node certificate the node CA issues
// (serial, node, role, allowed kinds, validity) so that a certificate can
// stop working before it expires: a re-join supersedes the node's earlier
// certificates, and an operator can revoke them. The gateway checks a
// session's certificate here when the session starts and again whenever the
// node's certificates change (a NOTIFY wakes its sessions), so a session
// with a superseded or revoked certificate is refused and an open one is
// closed. Consumers of attested results read the node's certificates here
// too.
package nodecerts

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/better-compute/commands/controlplane/commands/queue"
	"github.com/better-compute/commands/controlplane/internal/store"
	"github.com/better-compute/commands/internal/trust"
)

// Cert is one recorded certificate.
type Cert struct {
	Serial       string
	NodeID       string
	Role         string
	AllowedKinds []string
	NotBefore    time.Time
	NotAfter     time.Time
	IssuedAt     time.Time
	SupersededAt *time.Time
	RevokedAt    *time.Time
	RevokedBy    string
	PEM          []byte
}

// State is "current", "superseded" or "revoked".
func (c Cert) State() string {
	switch {
	case c.RevokedAt != nil:
		return "revoked"
	case c.SupersededAt != nil:
		return "superseded"
	}
	return "current"
}

// Errors of Check.
var (
	ErrSuperseded = errors.New("the certificate was superseded by a later join")
	ErrRevoked    = errors.New("the certificate was revoked")
	ErrUnknown    = errors.New("the certificate was not issued to this node")
)

// Serial is a certificate's serial as recorded (hex).
func Serial(c *x509.Certificate) string { return c.SerialNumber.Text(16) }

// Record stores a newly issued certificate in tx and supersedes the node's
// earlier ones, waking the node's sessions to check theirs.
func Record(ctx context.Context, tx pgx.Tx, certPEM []byte) (Cert, error) {
	cert, err := trust.ParseCertPEM(certPEM)
	if err != nil {
		return Cert{}, fmt.Errorf("recording a node certificate: %w", err)
	}
	id, err := trust.IdentityOf(cert)
	if err != nil {
		return Cert{}, fmt.Errorf("recording a node certificate: %w", err)
	}
	c := Cert{Serial: Serial(cert), NodeID: id.NodeID, Role: id.Role, AllowedKinds: id.AllowedKinds,
		NotBefore: cert.NotBefore, NotAfter: cert.NotAfter, PEM: certPEM}
	if _, err := tx.Exec(ctx, `UPDATE node_certs SET superseded_at = now() WHERE node_id = $1 AND superseded_at IS NULL`, c.NodeID); err != nil {
		return Cert{}, fmt.Errorf("superseding the certificates of %s: %w", c.NodeID, err)
	}
	err = tx.QueryRow(ctx, `
		INSERT INTO node_certs (serial, node_id, role, allowed_kinds, not_before, not_after, cert_pem)
		VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING issued_at`,
		c.Serial, c.NodeID, c.Role, c.AllowedKinds, c.NotBefore, c.NotAfter, certPEM).Scan(&c.IssuedAt)
	if err != nil {
		return Cert{}, fmt.Errorf("recording certificate %s of %s: %w", c.Serial, c.NodeID, err)
	}
	if err := queue.NotifyCerts(ctx, tx, c.NodeID); err != nil {
		return Cert{}, err
	}
	return c, nil
}

// Check says whether the certificate with serial may hold a session for
// nodeID: nil when it is the node's current one. A node none of whose
// certificates is recorded (joined before certificates were recorded) is
// let through, so an upgrade locks no node out; once a node re-joins, only
// its current certificate works.
func Check(ctx context.Context, db store.DBTX, nodeID, serial string) error {
	var found, any bool
	var superseded, revoked *time.Time
	rows, err := db.Query(ctx, `SELECT serial = $2, superseded_at, revoked_at FROM node_certs WHERE node_id = $1`, nodeID, serial)
	if err != nil {
		return fmt.Errorf("reading the certificates of %s: %w", nodeID, err)
	}
	defer rows.Close()
	for rows.Next() {
		var match bool
		var s, r *time.Time
		if err := rows.Scan(&match, &s, &r); err != nil {
			return fmt.Errorf("reading the certificates of %s: %w", nodeID, err)
		}
		any = true
		if match {
			found, superseded, revoked = true, s, r
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("reading the certificates of %s: %w", nodeID, err)
	}
	switch {
	case !any:
		return nil
	case !found:
		return fmt.Errorf("certificate %s of %s: %w", serial, nodeID, ErrUnknown)
	case revoked != nil:
		return fmt.Errorf("certificate %s of %s: %w at %s", serial, nodeID, ErrRevoked, revoked.UTC().Format(time.RFC3339))
	case superseded != nil:
		return fmt.Errorf("certificate %s of %s: %w at %s: the node must use the certificate of its latest join", serial, nodeID, ErrSuperseded, superseded.UTC().Format(time.RFC3339))
	}
	return nil
}

// Revoke revokes the node's certificates (only serial's when not empty)
// and wakes its sessions, which close. It returns the certificates revoked.
func Revoke(ctx context.Context, tx pgx.Tx, nodeID, serial, by string) ([]Cert, error) {
	rows, err := tx.Query(ctx, `
		UPDATE node_certs SET revoked_at = now(), revoked_by = $3
		WHERE node_id = $1 AND revoked_at IS NULL AND ($2 = '' OR serial = $2)
		RETURNING `+columns, nodeID, serial, by)
	if err != nil {
		return nil, fmt.Errorf("revoking the certificates of %s: %w", nodeID, err)
	}
	certs, err := scan(rows)
	if err != nil {
		return nil, err
	}
	if err := queue.NotifyCerts(ctx, tx, nodeID); err != nil {
		return nil, err
	}
	return certs, nil
}

// List returns the node's certificates, newest first.
func List(ctx context.Context, db store.DBTX, nodeID string) ([]Cert, error) {
	rows, err := db.Query(ctx, `SELECT `+columns+` FROM node_certs WHERE node_id = $1 ORDER BY issued_at DESC, serial`, nodeID)
	if err != nil {
		return nil, fmt.Errorf("listing the certificates of %s: %w", nodeID, err)
	}
	return scan(rows)
}

const columns = `serial, node_id, role, allowed_kinds, not_before, not_after, issued_at, superseded_at, revoked_at, revoked_by, cert_pem`

func scan(rows pgx.Rows) ([]Cert, error) {
	defer rows.Close()
	var out []Cert
	for rows.Next() {
		var c Cert
		if err := rows.Scan(&c.Serial, &c.NodeID, &c.Role, &c.AllowedKinds, &c.NotBefore, &c.NotAfter, &c.IssuedAt,
			&c.SupersededAt, &c.RevokedAt, &c.RevokedBy, &c.PEM); err != nil {
			return nil, fmt.Errorf("reading node certificates: %w", err)
		}
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("reading node certificates: %w", err)
	}
	return out, nil
}
