// Package nodes reads the nodes' rows as the API shows them: one live node
// with its inventory, conditions, session and health (Get), a tenant's live
// nodes by id under a filter (List), which tenant owns a node, deleted or
// not (TenantOf), and the fleet overview's node counts (Summarise). The
// queue keeps the columns it runs on (a node's session epoch and command
// sequence, commands/queue); this package reads a node as the fleet sees
// it.
package nodes

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/better-compute/commands/controlplane/fleet/nodehealth"
	"github.com/better-compute/commands/controlplane/internal/store"
)

// StaleAfter is how long after a gateway last refreshed a session (every
// 15s, server.sessionTouchEvery) a node counts as disconnected although no
// gateway recorded its session's end: its gateway died with it open.
const StaleAfter = time.Minute

// ErrNotFound is Get's answer for a node that is not the tenant's live node.
var ErrNotFound = errors.New("node not found")

// Row is a node as the nodes table holds it. The JSON columns are left as
// they are stored, for the caller to decode into what it shows.
type Row struct {
	ID                string
	TenantID          string
	Role              string
	AllowedKinds      []string
	AppliedGeneration int64
	CreatedAt         time.Time
	TrustVersion      int64
	Pool              string
	// Inventory and Conditions are what the node last reported (JSON).
	Inventory  []byte
	Conditions []byte
	// KindMismatches are the kinds whose manifest differs from the
	// registry's at the node's last Hello (JSON, queue.KindMismatch).
	KindMismatches []byte
	// Labels are the node's labels (a JSON object).
	Labels []byte
	// HelloKinds and RefusedPlugins are what its last Hello reported (JSON,
	// queue.HelloKind and queue.RefusedPlugin; null before its first).
	HelloKinds     []byte
	RefusedPlugins []byte
	// The session: its epoch, gateway and times, and whether it is open
	// now (Connected: opened, not closed, seen within StaleAfter).
	SessionEpoch    int64
	Gateway         string
	SessionOpenedAt *time.Time
	SessionClosedAt *time.Time
	SessionSeenAt   *time.Time
	Connected       bool
	DaemonVersion   string
	BootID          string
	// FailedChecks and CheckedAt are the verdict of its latest diag.nvml;
	// Healthy is nodehealth's rule on the row.
	FailedChecks []string
	CheckedAt    *time.Time
	Healthy      bool
}

// connectedSQL is Row.Connected on a row of nodes; the statement's third
// parameter is StaleAfter in seconds.
const connectedSQL = `coalesce(session_opened_at IS NOT NULL AND session_closed_at IS NULL
	  AND session_seen_at > now() - make_interval(secs => $3::float8), false)`

// columns are the columns scanRow reads; the statement's third parameter
// is StaleAfter in seconds.
var columns = `id, tenant_id, role, allowed_kinds, inventory, conditions, applied_generation, created_at, trust_version, kind_mismatches, pool,
	session_epoch, session_gateway, session_opened_at, session_closed_at, session_seen_at, daemon_version, boot_id, labels,
	` + connectedSQL + `, failed_checks, checked_at, NOT ` + nodehealth.UnhealthySQL("") + `, hello_kinds, refused_plugins`

func scanRow(r pgx.Row) (Row, error) {
	var x Row
	err := r.Scan(&x.ID, &x.TenantID, &x.Role, &x.AllowedKinds, &x.Inventory, &x.Conditions, &x.AppliedGeneration, &x.CreatedAt, &x.TrustVersion, &x.KindMismatches, &x.Pool,
		&x.SessionEpoch, &x.Gateway, &x.SessionOpenedAt, &x.SessionClosedAt, &x.SessionSeenAt, &x.DaemonVersion, &x.BootID, &x.Labels, &x.Connected,
		&x.FailedChecks, &x.CheckedAt, &x.Healthy, &x.HelloKinds, &x.RefusedPlugins)
	return x, err
}

// Get returns the tenant's live node nodeID; ErrNotFound when it has none
// of that id (another tenant's, deleted, or none).
func Get(ctx context.Context, db store.DBTX, tenantID, nodeID string) (Row, error) {
	x, err := scanRow(db.QueryRow(ctx, `SELECT `+columns+`
		FROM nodes WHERE id = $1 AND tenant_id = $2 AND deleted_at IS NULL`, nodeID, tenantID, StaleAfter.Seconds()))
	if errors.Is(err, pgx.ErrNoRows) {
		return Row{}, ErrNotFound
	}
	if err != nil {
		return Row{}, fmt.Errorf("reading node %s: %w", nodeID, err)
	}
	return x, nil
}

// List returns up to limit live nodes of the tenant that pass f, by id,
// after the id after ("" for the first).
func List(ctx context.Context, db store.DBTX, tenantID string, f Filter, after string, limit int) ([]Row, error) {
	cond, args := f.sql(5)
	rs, err := db.Query(ctx, `SELECT `+columns+`
		FROM nodes WHERE tenant_id = $1 AND deleted_at IS NULL AND id > $2 AND `+cond+`
		ORDER BY id LIMIT $4`, append([]any{tenantID, after, StaleAfter.Seconds(), limit}, args...)...)
	if err != nil {
		return nil, fmt.Errorf("listing the nodes of %s: %w", tenantID, err)
	}
	defer rs.Close()
	var out []Row
	for rs.Next() {
		r, err := scanRow(rs)
		if err != nil {
			return nil, fmt.Errorf("listing the nodes of %s: %w", tenantID, err)
		}
		out = append(out, r)
	}
	if err := rs.Err(); err != nil {
		return nil, fmt.Errorf("listing the nodes of %s: %w", tenantID, err)
	}
	return out, nil
}

// TenantOf returns the tenant that owns nodeID, a deleted node's too (its
// commands' history outlives it); ok is false when no node ever had the id.
func TenantOf(ctx context.Context, db store.DBTX, nodeID string) (tenantID string, ok bool, err error) {
	err = db.QueryRow(ctx, `SELECT tenant_id FROM nodes WHERE id = $1`, nodeID).Scan(&tenantID)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("looking up node %s: %w", nodeID, err)
	}
	return tenantID, true, nil
}
