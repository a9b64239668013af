// Package jointokens stores the one-time join tokens a node exchanges for
// its first certificate (controlplane/front/join serves the exchange): a
// token is kept only as its SHA-256, with what the certificate it buys
// will say (the node, its role and allowed kinds) and the pool the node
// joins into, until it expires or is burned. Burning is one guarded
// UPDATE, so two joins with one token make one certificate.
package jointokens

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/better-compute/commands/controlplane/internal/store"
)

// ErrNoNode is Store's answer for a node that does not exist or is deleted.
var ErrNoNode = errors.New("no live node of that id")

// ErrUnusable is Burn's answer for a token that is unknown, already used
// or expired, the same for each: a caller guessing tokens learns nothing.
var ErrUnusable = errors.New("join token is unknown, already used or expired")

// Token is a token to store: its hash, and what it grants.
type Token struct {
	// SHA256 is the token's hash; the token itself is never stored.
	SHA256 []byte
	Grant
	// TTL is how long the token may be used from now.
	TTL time.Duration
}

// Grant is what a token grants the node that burns it.
type Grant struct {
	// NodeID is the node the token joins.
	NodeID string
	// Role and AllowedKinds are what the node's certificate carries
	// (AllowedKinds empty: a full identity).
	Role         string
	AllowedKinds []string
	// Pool, when set, is the pool the node joins into.
	Pool string
}

// Store stores t for its node, if that node is live (one statement:
// the check and the insert), and returns when the token expires.
func Store(ctx context.Context, db store.DBTX, t Token) (time.Time, error) {
	var expires time.Time
	err := db.QueryRow(ctx, `
		INSERT INTO join_tokens (token_sha256, node_id, role, allowed_kinds, expires_at, pool)
		SELECT $1, id, $3, $4, now() + $5 * interval '1 microsecond', $6 FROM nodes WHERE id = $2 AND deleted_at IS NULL
		RETURNING expires_at`, t.SHA256, t.NodeID, t.Role, t.AllowedKinds, t.TTL.Microseconds(), t.Pool).Scan(&expires)
	if errors.Is(err, pgx.ErrNoRows) {
		return time.Time{}, ErrNoNode
	}
	if err != nil {
		return time.Time{}, fmt.Errorf("storing join token for %s: %w", t.NodeID, err)
	}
	return expires, nil
}

// Burn marks the unused, unexpired token with the hash used, in tx, and
// returns what it grants; ErrUnusable when there is none such. A second
// Burn of one token waits on the first's row lock, then finds it used:
// the guarded UPDATE is the whole check.
func Burn(ctx context.Context, tx pgx.Tx, sha256 []byte) (Grant, error) {
	var g Grant
	err := tx.QueryRow(ctx, `
		UPDATE join_tokens SET used_at = now()
		WHERE token_sha256 = $1 AND used_at IS NULL AND expires_at > now()
		RETURNING node_id, role, allowed_kinds, pool`, sha256).Scan(&g.NodeID, &g.Role, &g.AllowedKinds, &g.Pool)
	if errors.Is(err, pgx.ErrNoRows) {
		return Grant{}, ErrUnusable
	}
	if err != nil {
		return Grant{}, fmt.Errorf("burning join token: %w", err)
	}
	return g, nil
}
