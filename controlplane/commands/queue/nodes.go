package queue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/better-compute/commands/controlplane/commands/events"
	"github.com/better-compute/commands/controlplane/internal/errcode"
	"github.com/better-compute/commands/controlplane/internal/ids"
)

// Tenant is a row of tenants.
type Tenant struct {
	// ID is the tenant_… id; CreateTenant makes one when empty.
	ID string
	// Name is for people.
	Name string
	// CreatedAt is set by the database.
	CreatedAt time.Time
}

// Node is the part of a nodes row that the queue reads.
type Node struct {
	// ID is the node_… id; CreateNode makes one when empty.
	ID string
	// TenantID owns the node.
	TenantID string
	// Role is the agent role ("node" when empty).
	Role string
	// AllowedKinds is nil for a full identity; a restricted identity lists
	// the only kinds it accepts (an empty, non-nil list accepts none).
	AllowedKinds []string
	// SessionEpoch is the epoch of the node's current session.
	SessionEpoch int64
	// AppliedGeneration is the spec generation the node last applied.
	AppliedGeneration int64
	// NextCmdSeq is the seq the next command will get.
	NextCmdSeq int64
	// CreatedAt and DeletedAt are the row's timestamps.
	CreatedAt time.Time
	DeletedAt *time.Time
	// Pool is the node's pool (its disruption budget, migration 0020);
	// "default" when created without one.
	Pool string
}

// CreateTenant inserts a tenant; a duplicate id is CONFLICT.
func (q *Queue) CreateTenant(ctx context.Context, db DBTX, t Tenant) (Tenant, error) {
	if t.ID == "" {
		t.ID = ids.NewTenant()
	}
	err := db.QueryRow(ctx, `INSERT INTO tenants (id, name) VALUES ($1, $2) RETURNING created_at`, t.ID, t.Name).Scan(&t.CreatedAt)
	if isUniqueViolation(err) {
		return Tenant{}, errcode.Newf(errcode.Conflict, "tenant-exists", map[string]string{"tenantId": t.ID}, "tenant %s already exists", t.ID)
	}
	if err != nil {
		return Tenant{}, fmt.Errorf("creating tenant %s: %w", t.ID, err)
	}
	return t, nil
}

// CreateNode inserts a node of an existing tenant; a duplicate id is
// CONFLICT and an unknown tenant NOT_FOUND.
func (q *Queue) CreateNode(ctx context.Context, db DBTX, n Node) (Node, error) {
	if n.ID == "" {
		n.ID = ids.NewNode()
	}
	if n.Role == "" {
		n.Role = "node"
	}
	err := db.QueryRow(ctx, `INSERT INTO nodes (id, tenant_id, role, allowed_kinds, pool) VALUES ($1, $2, $3, $4, coalesce(NULLIF($5, ''), 'default'))
		RETURNING session_epoch, applied_generation, next_cmd_seq, created_at, pool`,
		n.ID, n.TenantID, n.Role, n.AllowedKinds, n.Pool).Scan(&n.SessionEpoch, &n.AppliedGeneration, &n.NextCmdSeq, &n.CreatedAt, &n.Pool)
	var pe *pgconn.PgError
	switch {
	case isUniqueViolation(err):
		return Node{}, errcode.Newf(errcode.Conflict, "node-exists", map[string]string{"nodeId": n.ID}, "node %s already exists", n.ID)
	case errors.As(err, &pe) && pe.Code == "23503":
		return Node{}, errcode.Newf(errcode.NotFound, "tenant-not-found", map[string]string{"tenantId": n.TenantID}, "tenant %s not found", n.TenantID)
	case err != nil:
		return Node{}, fmt.Errorf("creating node %s: %w", n.ID, err)
	}
	return n, nil
}

// GetNode returns a node that tenantID can see ("" sees every tenant). A
// deleted node, an unknown one and another tenant's are all NOT_FOUND, so
// the API never tells a caller that someone else's node exists.
func (q *Queue) GetNode(ctx context.Context, db DBTX, tenantID, nodeID string) (Node, error) {
	var n Node
	err := db.QueryRow(ctx, `SELECT id, tenant_id, role, allowed_kinds, session_epoch, applied_generation, next_cmd_seq, created_at, deleted_at
		FROM nodes WHERE id = $1 AND ($2 = '' OR tenant_id = $2) AND deleted_at IS NULL`, nodeID, tenantID).
		Scan(&n.ID, &n.TenantID, &n.Role, &n.AllowedKinds, &n.SessionEpoch, &n.AppliedGeneration, &n.NextCmdSeq, &n.CreatedAt, &n.DeletedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return Node{}, nodeNotFound(nodeID)
	}
	if err != nil {
		return Node{}, fmt.Errorf("reading node %s: %w", nodeID, err)
	}
	return n, nil
}

// SetAllowedKinds records the allowed kinds of the node's current identity:
// nil for a full identity, a list for a restricted one.
func (q *Queue) SetAllowedKinds(ctx context.Context, db DBTX, nodeID string, allowed []string) error {
	tag, err := db.Exec(ctx, `UPDATE nodes SET allowed_kinds = $2 WHERE id = $1 AND deleted_at IS NULL`, nodeID, allowed)
	if err != nil {
		return fmt.Errorf("setting allowed kinds of %s: %w", nodeID, err)
	}
	if tag.RowsAffected() == 0 {
		return nodeNotFound(nodeID)
	}
	return nil
}

// BeginSession bumps the node's session epoch for a new session and returns
// it; reports fenced with an older epoch no longer land.
func (q *Queue) BeginSession(ctx context.Context, db DBTX, nodeID string) (int64, error) {
	var epoch int64
	err := db.QueryRow(ctx, `UPDATE nodes SET session_epoch = session_epoch + 1 WHERE id = $1 AND deleted_at IS NULL RETURNING session_epoch`, nodeID).Scan(&epoch)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, nodeNotFound(nodeID)
	}
	if err != nil {
		return 0, fmt.Errorf("beginning a session for %s: %w", nodeID, err)
	}
	return epoch, nil
}

// SessionHello is what a node's Hello says about itself that the node row
// keeps.
type SessionHello struct {
	// NodeID is the node (its certificate's).
	NodeID string
	// JournalID and BootID are the daemon's journal and boot ids.
	JournalID, BootID string
	// Role is the certificate's role.
	Role string
	// TrustVersion is the trust bundle version the node holds.
	TrustVersion int64
	// DaemonVersion is the daemon's version (the rollout module's current).
	DaemonVersion string
	// Gateway names the gateway (replica) that holds the session.
	Gateway string
}

// SessionStart is a new session's epoch and what the node row said before
// it: the ids of the last session, from which the gateway tells a new boot,
// role or journal ("" when the node never had a session).
type SessionStart struct {
	Epoch                               int64
	PrevJournalID, PrevBootID, PrevRole string
}

// startSessionSQL locks the node row, remembers its last ids, and bumps the
// epoch and records the new ids, in one statement.
const startSessionSQL = `
WITH prev AS (
  SELECT id, journal_id, boot_id, role FROM nodes WHERE id = $1 AND deleted_at IS NULL FOR UPDATE
)
UPDATE nodes n SET session_epoch = n.session_epoch + 1, journal_id = $2, boot_id = $3, role = $4, trust_version = $5, daemon_version = $6,
  session_gateway = $7, session_opened_at = now(), session_closed_at = NULL
FROM prev WHERE n.id = prev.id
RETURNING n.session_epoch, prev.journal_id, prev.boot_id, prev.role`

// StartSession begins a node's session in tx: it bumps the session epoch
// (reports fenced with an older one no longer land) and records the
// Hello's journal id, boot id and role, returning what they were before so
// that the caller settles what the reconnect proves in the same
// transaction. A deleted or unknown node is NOT_FOUND.
func (q *Queue) StartSession(ctx context.Context, tx pgx.Tx, h SessionHello) (SessionStart, error) {
	var s SessionStart
	err := tx.QueryRow(ctx, startSessionSQL, h.NodeID, h.JournalID, h.BootID, h.Role, h.TrustVersion, h.DaemonVersion, h.Gateway).
		Scan(&s.Epoch, &s.PrevJournalID, &s.PrevBootID, &s.PrevRole)
	if errors.Is(err, pgx.ErrNoRows) {
		return SessionStart{}, nodeNotFound(h.NodeID)
	}
	if err != nil {
		return SessionStart{}, fmt.Errorf("starting a session for %s: %w", h.NodeID, err)
	}
	return s, nil
}

// EndSession records that the node's session of epoch ended: it is
// disconnected from now, last seen now. A newer session (a reconnect that
// superseded this one, perhaps at another gateway) is left as it is, so a
// late close never marks an open session closed.
func (q *Queue) EndSession(ctx context.Context, db DBTX, nodeID string, epoch int64) error {
	if _, err := db.Exec(ctx, `UPDATE nodes SET session_closed_at = now(), session_seen_at = now()
		WHERE id = $1 AND session_epoch = $2 AND session_closed_at IS NULL`, nodeID, epoch); err != nil {
		return fmt.Errorf("ending the session of %s (epoch %d): %w", nodeID, epoch, err)
	}
	return nil
}

// RecordNodeStatus stores what a node reported about itself: its inventory
// (nil keeps the stored one, as a NodeStatus without inventory means
// unchanged) and its conditions, both JSON.
func (q *Queue) RecordNodeStatus(ctx context.Context, db DBTX, nodeID string, inventory, conditions json.RawMessage) error {
	var inv, conds any
	if inventory != nil {
		inv = string(inventory)
	}
	if conditions != nil {
		conds = string(conditions)
	}
	if _, err := db.Exec(ctx, `UPDATE nodes SET inventory = coalesce($2::jsonb, inventory), conditions = coalesce($3::jsonb, conditions)
		WHERE id = $1 AND deleted_at IS NULL`, nodeID, inv, conds); err != nil {
		return fmt.Errorf("recording the status of %s: %w", nodeID, err)
	}
	return nil
}

func isUniqueViolation(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "23505"
}

// Blocked is why a pending command cannot progress until a person acts,
// with the details the API shows as blockedBy.
type Blocked struct {
	// Reason: kind-mismatch, kind-not-loaded or plugin-refused.
	Reason string `json:"reason"`
	// Message says it in words; Fix says what to do.
	Message string `json:"message"`
	Fix     string `json:"fix,omitempty"`
	Kind    string `json:"kind,omitempty"`
	// NodeDigest and NodeVersion are the node's manifest of the kind;
	// RegistryDigest and RegistryVersion the registry's (newest).
	NodeDigest      string `json:"nodeDigest,omitempty"`
	NodeVersion     string `json:"nodeVersion,omitempty"`
	RegistryDigest  string `json:"registryDigest,omitempty"`
	RegistryVersion string `json:"registryVersion,omitempty"`
	// Plugin, PinnedSHA256 and FoundSHA256 name a refused plugin file.
	Plugin       string `json:"plugin,omitempty"`
	PinnedSHA256 string `json:"pinnedSha256,omitempty"`
	FoundSHA256  string `json:"foundSha256,omitempty"`
}

// setWaitingSQL records why a pending command waits, once per change, and
// publishes node.command.waiting with it, so that a caller following the
// command (the CLI's --wait) learns it at once.
const setWaitingSQL = `
WITH u AS (
  UPDATE commands SET waiting_reason = $3, waiting_message = $4, waiting_detail = $5::jsonb
  WHERE id = $2 AND node_id = $1 AND state = 'pending'
    AND (waiting_reason, waiting_message) IS DISTINCT FROM ($3, $4)
  RETURNING tenant_id, id, node_id, kind
), ev AS (
  INSERT INTO outbox (tenant_id, topic, payload)
  SELECT tenant_id, '` + events.TopicCommandWaiting + `',
    jsonb_build_object('commandId', id, 'nodeId', node_id, 'kind', kind, 'reason', $3::text, 'message', $4::text,
      'blockedBy', $5::jsonb)
  FROM u
)
SELECT count(*) FROM u`

// SetWaiting records why a pending command is held (reason, in words, and
// when a person must act, the details), writing and publishing only per
// change. It reports whether it wrote.
func (q *Queue) SetWaiting(ctx context.Context, db DBTX, nodeID, commandID, reason, message string, detail *Blocked) (bool, error) {
	var d any
	if detail != nil {
		b, err := json.Marshal(detail)
		if err != nil {
			return false, fmt.Errorf("encoding why %s waits: %w", commandID, err)
		}
		d = string(b)
	}
	var n int
	if err := db.QueryRow(ctx, setWaitingSQL, nodeID, commandID, reason, message, d).Scan(&n); err != nil {
		return false, fmt.Errorf("recording why %s waits: %w", commandID, err)
	}
	return n > 0, nil
}

// KindMismatch is a kind whose manifest a node runs differs from the
// registry's.
type KindMismatch struct {
	Kind           string `json:"kind"`
	NodeDigest     string `json:"nodeDigest"`
	RegistryDigest string `json:"registryDigest"`
	RegistryVer    string `json:"registryVersion,omitempty"`
}

// HelloKind is a kind a node's last Hello reported, with how the registry
// sees it (kinds.StatusRegistered, …Compatible, …Mismatch, …Unregistered).
type HelloKind struct {
	Kind            string `json:"kind"`
	Version         string `json:"version,omitempty"`
	Digest          string `json:"digest,omitempty"`
	Status          string `json:"status"`
	RegistryVersion string `json:"registryVersion,omitempty"`
}

// RefusedPlugin is a plugin file a node's bcd refused, as its Hello said.
type RefusedPlugin struct {
	Plugin       string   `json:"plugin"`
	Reason       string   `json:"reason"`
	Message      string   `json:"message,omitempty"`
	PinnedSHA256 string   `json:"pinnedSha256,omitempty"`
	FoundSHA256  string   `json:"foundSha256,omitempty"`
	Kinds        []string `json:"kinds,omitempty"`
}

// RecordHello stores what the node's Hello reported of its kinds and
// refused plugins, and the kinds it runs at another digest than the
// registry (none clears), in one statement: nodes get shows them, kinds
// get counts the nodes per digest.
func (q *Queue) RecordHello(ctx context.Context, db DBTX, nodeID string, ks []HelloKind, refused []RefusedPlugin, ms []KindMismatch) error {
	sort.Slice(ks, func(i, j int) bool { return ks[i].Kind < ks[j].Kind })
	kb, err := json.Marshal(ks)
	if err != nil {
		return fmt.Errorf("encoding the kinds of %s: %w", nodeID, err)
	}
	var rb any
	if len(refused) > 0 {
		b, err := json.Marshal(refused)
		if err != nil {
			return fmt.Errorf("encoding the refused plugins of %s: %w", nodeID, err)
		}
		rb = string(b)
	}
	var mb any
	if len(ms) > 0 {
		b, err := json.Marshal(ms)
		if err != nil {
			return fmt.Errorf("encoding kind mismatches: %w", err)
		}
		mb = string(b)
	}
	if _, err := db.Exec(ctx, `UPDATE nodes SET hello_kinds = $2::jsonb, refused_plugins = $3::jsonb, kind_mismatches = $4::jsonb WHERE id = $1`,
		nodeID, string(kb), rb, mb); err != nil {
		return fmt.Errorf("recording the kinds of %s: %w", nodeID, err)
	}
	return nil
}
