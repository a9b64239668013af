// Package batches is the control plane's half of destructive batches under
// the approver quorum: a batch records a scope (leaves of subject, kind and
// an optional payload digest) as an RFC 6962 Merkle tree, approvers sign its
// statement locally and upload the signature, and once enough distinct
// approvers signed, the batch's held commands get their notBefore and go
// out with the approval and the inclusion proof of their leaf. The node
// checks both itself; nothing here is trusted by the node. Without approver
// keys a batch is recorded for audit only and its commands go out at once.
package batches

import (
	"context"
	"crypto/ed25519"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/better-compute/commands/controlplane/internal/errcode"
	"github.com/better-compute/commands/controlplane/internal/ids"
	"github.com/better-compute/commands/controlplane/internal/store"
	"github.com/better-compute/commands/internal/trust"
)

// The batch states.
const (
	StateAwaiting = "awaiting-approval"
	StateApproved = "approved"
	StateExpired  = "expired"
	// StateRecorded is a batch made without approver keys: audit only.
	StateRecorded = "recorded"
)

// Deadlines.
const (
	DefaultDeadline = time.Hour
	MinDeadline     = time.Minute
	MaxDeadline     = 24 * time.Hour
	// MaxLeaves bounds a batch's scope.
	MaxLeaves = 10000
)

// Leaf is one scope entry as the API and the table hold it.
type Leaf struct {
	Subject       string `json:"subject"`
	Kind          string `json:"kind"`
	PayloadSHA256 string `json:"payloadSha256,omitempty"` // hex
}

// Approval is one approver's signature.
type Approval struct {
	KeyID, Approver string
	Signature       []byte
	ApprovedAt      time.Time
}

// Batch is one batch.
type Batch struct {
	ID, TenantID, Requester, Reason, State string
	Scope                                  []Leaf
	TreeSize                               int
	RootHash                               []byte
	Statement                              []byte
	Deadline, CreatedAt                    time.Time
	ApprovedAt                             *time.Time
	Threshold                              int
	Approvals                              []Approval
}

// Needed is how many more distinct approvers must sign.
func (b Batch) Needed() int {
	if b.State != StateAwaiting {
		return 0
	}
	return max(0, b.Threshold-len(b.Approvals))
}

// Quorum is the approver side of the trust bundle: the keys and threshold
// approvals are checked against (nil keys: no quorum, audit only).
type Quorum struct {
	Approvers []trust.Approver
	Threshold int
}

// On reports whether approver keys are configured.
func (q Quorum) On() bool { return len(q.Approvers) > 0 }

// Needed is how many approvals a batch needs: 0 when no approver keys are
// configured (a batch is audit-only and its commands run at once).
func (q Quorum) Needed() int {
	if !q.On() {
		return 0
	}
	return q.threshold()
}

func (q Quorum) threshold() int {
	if q.Threshold > 0 {
		return q.Threshold
	}
	return len(q.Approvers)
}

// CreateParams describe a batch.
type CreateParams struct {
	TenantID, Requester, Reason, IdempotencyKey string
	Scope                                       []Leaf
	Deadline                                    time.Duration
}

func invalid(field, format string, args ...any) error {
	return &errcode.Error{Code: errcode.InvalidInput, Reason: "invalid-" + field, Message: fmt.Sprintf(format, args...), Details: map[string]string{"field": field}}
}

// trustLeaves turns the scope into the tree's leaves.
func trustLeaves(scope []Leaf) ([]trust.Leaf, error) {
	var out []trust.Leaf
	for i, l := range scope {
		tl := trust.Leaf{Subject: l.Subject, Kind: l.Kind}
		if l.Subject == "" || l.Kind == "" {
			return nil, invalid("scope", "scope[%d]: subject and kind are required", i)
		}
		if l.PayloadSHA256 != "" {
			d, err := hex.DecodeString(l.PayloadSHA256)
			if err != nil || len(d) != 32 {
				return nil, invalid("scope", "scope[%d].payloadSha256 %q: want 64 hex digits (the SHA-256 of the payload's canonical JSON)", i, l.PayloadSHA256)
			}
			tl.PayloadSHA256 = d
		}
		out = append(out, tl)
	}
	return out, nil
}

// Create records a batch in tx (idempotent per tenant, requester and key:
// a repeat returns the first batch). With the quorum on it awaits
// approvals; without, it is recorded for audit and its commands go at once.
func Create(ctx context.Context, tx pgx.Tx, q Quorum, p CreateParams, now time.Time) (Batch, bool, error) {
	if p.Reason == "" {
		return Batch{}, false, invalid("reason", "reason is required: approvers read it")
	}
	if len(p.Scope) == 0 || len(p.Scope) > MaxLeaves {
		return Batch{}, false, invalid("scope", "scope needs 1 to %d leaves, has %d", MaxLeaves, len(p.Scope))
	}
	if p.Deadline == 0 {
		p.Deadline = DefaultDeadline
	}
	if p.Deadline < MinDeadline || p.Deadline > MaxDeadline {
		return Batch{}, false, invalid("deadlineSeconds", "deadline %s is outside [%s, %s]", p.Deadline, MinDeadline, MaxDeadline)
	}
	if p.IdempotencyKey != "" {
		b, err := getBy(ctx, tx, `tenant_id = $1 AND requester = $2 AND idempotency_key = $3`, p.TenantID, p.Requester, p.IdempotencyKey)
		if err == nil {
			return b, true, nil
		}
		if !errors.Is(err, errNoBatch) {
			return Batch{}, false, err
		}
	}
	leaves, err := trustLeaves(p.Scope)
	if err != nil {
		return Batch{}, false, err
	}
	tree, err := trust.NewTree(leaves)
	if err != nil {
		return Batch{}, false, invalid("scope", "%v", err)
	}
	b := Batch{ID: ids.New(ids.Batch), TenantID: p.TenantID, Requester: p.Requester, Reason: p.Reason, Scope: p.Scope,
		TreeSize: int(tree.Size()), RootHash: tree.Root(), Deadline: now.Add(p.Deadline).UTC().Truncate(time.Second), State: StateAwaiting, Threshold: q.threshold()}
	if !q.On() {
		b.State, b.Threshold = StateRecorded, 0
	}
	if b.Statement, err = (trust.BatchStatement{BatchID: b.ID, TreeSize: tree.Size(), RootHash: hex.EncodeToString(b.RootHash), NotAfter: b.Deadline, Requester: b.Requester}).Encode(); err != nil {
		return Batch{}, false, err
	}
	scope, err := json.Marshal(b.Scope)
	if err != nil {
		return Batch{}, false, fmt.Errorf("encoding the scope: %w", err)
	}
	err = tx.QueryRow(ctx, `INSERT INTO command_batches (id, tenant_id, requester, idempotency_key, reason, scope, tree_size, root_hash, statement, state, deadline, threshold, approved_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, CASE WHEN $10 = 'recorded' THEN now() END) RETURNING created_at, approved_at`,
		b.ID, b.TenantID, b.Requester, p.IdempotencyKey, b.Reason, scope, b.TreeSize, b.RootHash, b.Statement, b.State, b.Deadline, b.Threshold).Scan(&b.CreatedAt, &b.ApprovedAt)
	if err != nil {
		return Batch{}, false, fmt.Errorf("storing batch: %w", err)
	}
	if err := event(ctx, tx, b, "command.batch.created"); err != nil {
		return Batch{}, false, err
	}
	return b, false, nil
}

var errNoBatch = errors.New("no such batch")

// NotFound is the API's answer for a batch the tenant cannot see.
func NotFound(id string) error {
	return &errcode.Error{Code: errcode.NotFound, Reason: "batch-not-found", Message: "batch " + id + " not found", Details: map[string]string{"batchId": id}}
}

const columns = `id, tenant_id, requester, reason, scope, tree_size, root_hash, statement, state, deadline, threshold, created_at, approved_at`

func scanBatch(row pgx.Row) (Batch, error) {
	var b Batch
	var scope []byte
	if err := row.Scan(&b.ID, &b.TenantID, &b.Requester, &b.Reason, &scope, &b.TreeSize, &b.RootHash, &b.Statement, &b.State, &b.Deadline, &b.Threshold, &b.CreatedAt, &b.ApprovedAt); err != nil {
		return b, err
	}
	if err := json.Unmarshal(scope, &b.Scope); err != nil {
		return b, fmt.Errorf("reading the scope of %s: %w", b.ID, err)
	}
	return b, nil
}

func getBy(ctx context.Context, db store.DBTX, where string, args ...any) (Batch, error) {
	b, err := scanBatch(db.QueryRow(ctx, `SELECT `+columns+` FROM command_batches WHERE `+where, args...))
	if errors.Is(err, pgx.ErrNoRows) {
		return Batch{}, errNoBatch
	}
	if err != nil {
		return Batch{}, fmt.Errorf("reading batch: %w", err)
	}
	if err := loadApprovals(ctx, db, &b); err != nil {
		return Batch{}, err
	}
	return b, nil
}

func loadApprovals(ctx context.Context, db store.DBTX, b *Batch) error {
	rows, err := db.Query(ctx, `SELECT key_id, approver, signature, approved_at FROM batch_approvals WHERE batch_id = $1 ORDER BY approved_at, key_id`, b.ID)
	if err != nil {
		return fmt.Errorf("reading the approvals of %s: %w", b.ID, err)
	}
	defer rows.Close()
	for rows.Next() {
		var a Approval
		if err := rows.Scan(&a.KeyID, &a.Approver, &a.Signature, &a.ApprovedAt); err != nil {
			return fmt.Errorf("reading the approvals of %s: %w", b.ID, err)
		}
		b.Approvals = append(b.Approvals, a)
	}
	return rows.Err()
}

// Get returns the tenant's batch (NOT_FOUND for another tenant's).
func Get(ctx context.Context, db store.DBTX, tenantID, id string) (Batch, error) {
	b, err := getBy(ctx, db, `id = $1 AND ($2 = '' OR tenant_id = $2)`, id, tenantID)
	if errors.Is(err, errNoBatch) {
		return Batch{}, NotFound(id)
	}
	return b, err
}

// CountAwaitingApproval counts the tenant's batches awaiting approval whose
// deadline is after now.
func CountAwaitingApproval(ctx context.Context, db store.DBTX, tenantID string, now time.Time) (int64, error) {
	var n int64
	if err := db.QueryRow(ctx, `SELECT count(*) FROM command_batches WHERE tenant_id = $1 AND state = '`+StateAwaiting+`' AND deadline > $2`,
		tenantID, now).Scan(&n); err != nil {
		return 0, fmt.Errorf("counting batches awaiting approval: %w", err)
	}
	return n, nil
}

// List returns the tenant's batches, newest first, filtered by state.
func List(ctx context.Context, db store.DBTX, tenantID, state string, limit int) ([]Batch, error) {
	return list(ctx, db, tenantID, state, "", limit)
}

// ListByRequesterPrefix returns the tenant's batches whose requester starts
// with prefix (the platform's: "platform:"), newest first.
func ListByRequesterPrefix(ctx context.Context, db store.DBTX, tenantID, prefix string, limit int) ([]Batch, error) {
	return list(ctx, db, tenantID, "", prefix, limit)
}

func list(ctx context.Context, db store.DBTX, tenantID, state, requesterPrefix string, limit int) ([]Batch, error) {
	if limit <= 0 || limit > 200 {
		limit = 100
	}
	rows, err := db.Query(ctx, `SELECT `+columns+` FROM command_batches WHERE tenant_id = $1 AND ($2 = '' OR state = $2)
		AND ($4 = '' OR starts_with(requester, $4)) ORDER BY created_at DESC, id DESC LIMIT $3`, tenantID, state, limit, requesterPrefix)
	if err != nil {
		return nil, fmt.Errorf("listing batches: %w", err)
	}
	var out []Batch
	for rows.Next() {
		b, err := scanBatch(rows)
		if err != nil {
			rows.Close()
			return nil, fmt.Errorf("listing batches: %w", err)
		}
		out = append(out, b)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	for i := range out {
		if err := loadApprovals(ctx, db, &out[i]); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func event(ctx context.Context, tx pgx.Tx, b Batch, topic string) error {
	if _, err := tx.Exec(ctx, `INSERT INTO outbox (tenant_id, topic, payload) VALUES ($1, $2, jsonb_build_object('batchId', $3::text, 'state', $4::text))`,
		b.TenantID, topic, b.ID, b.State); err != nil {
		return fmt.Errorf("publishing %s: %w", topic, err)
	}
	return nil
}

// refusal is an INVALID_STATE or PERMISSION_DENIED answer to an approval.
func refusal(code errcode.Code, reason, format string, args ...any) error {
	return &errcode.Error{Code: code, Reason: reason, Message: fmt.Sprintf(format, args...)}
}

// Approve records one approver's signature in tx: the key must be one of
// the quorum's, the signature must verify over the batch's statement, the
// approver may not be the requester, an agent principal never approves, and
// each key counts once. When the threshold is met the batch is approved and
// its held commands get notBefore now.
func Approve(ctx context.Context, tx pgx.Tx, q Quorum, tenantID, batchID, keyID string, sig []byte, principal string, agent bool, now time.Time) (Batch, error) {
	if agent {
		return Batch{}, refusal(errcode.PermissionDenied, "agent-cannot-approve", "an agent principal can never approve a batch: a person approves with their approver key")
	}
	b, err := getBy(ctx, tx, `id = $1 AND tenant_id = $2 FOR UPDATE`, batchID, tenantID)
	if errors.Is(err, errNoBatch) {
		return Batch{}, NotFound(batchID)
	}
	if err != nil {
		return Batch{}, err
	}
	switch {
	case b.State == StateRecorded:
		return b, refusal(errcode.InvalidState, "no-quorum", "batch %s was recorded without approver keys: it needs no approval", b.ID)
	case b.State == StateApproved:
		return b, refusal(errcode.InvalidState, "already-approved", "batch %s is already approved", b.ID)
	case b.State == StateExpired || !now.Before(b.Deadline):
		return b, refusal(errcode.InvalidState, "batch-expired", "batch %s passed its deadline %s", b.ID, b.Deadline.Format(time.RFC3339))
	}
	var approver *trust.Approver
	for i := range q.Approvers {
		if q.Approvers[i].KeyID() == keyID {
			approver = &q.Approvers[i]
		}
	}
	if approver == nil {
		return b, refusal(errcode.PermissionDenied, "unknown-approver-key", "key %s is not an approver key (pki.approvers)", keyID)
	}
	if approver.Name != "" && approver.Name == b.Requester || principal == b.Requester {
		return b, refusal(errcode.PermissionDenied, "requester-cannot-approve", "%s requested batch %s and cannot approve it", b.Requester, b.ID)
	}
	if err := trust.VerifyEd25519(ed25519.PublicKey(approver.PublicKey), trust.PurposeBatchApproval, b.Statement, sig); err != nil {
		return b, refusal(errcode.InvalidInput, "bad-approval-signature", "the signature does not verify over batch %s's statement with key %s: sign the statement commandBatches.get returns", b.ID, keyID)
	}
	for _, a := range b.Approvals {
		if a.KeyID == keyID {
			return b, refusal(errcode.Conflict, "already-approved-by-key", "key %s (%s) already approved batch %s; each key counts once", keyID, a.Approver, b.ID)
		}
	}
	if _, err := tx.Exec(ctx, `INSERT INTO batch_approvals (batch_id, key_id, approver, signature) VALUES ($1, $2, $3, $4)`, b.ID, keyID, approver.Name, sig); err != nil {
		return b, fmt.Errorf("storing the approval: %w", err)
	}
	b.Approvals = append(b.Approvals, Approval{KeyID: keyID, Approver: approver.Name, Signature: sig, ApprovedAt: now})
	if len(b.Approvals) < b.Threshold {
		return b, nil
	}
	if err := tx.QueryRow(ctx, `UPDATE command_batches SET state = 'approved', approved_at = now() WHERE id = $1 RETURNING approved_at`, b.ID).Scan(&b.ApprovedAt); err != nil {
		return b, fmt.Errorf("approving batch %s: %w", b.ID, err)
	}
	b.State = StateApproved
	// The held commands go out now; the trigger on awaiting_approval wakes
	// their nodes' sessions.
	if _, err := tx.Exec(ctx, `UPDATE commands SET awaiting_approval = false, not_before = now() WHERE batch_id = $1 AND awaiting_approval AND state = 'pending'`, b.ID); err != nil {
		return b, fmt.Errorf("releasing the commands of %s: %w", b.ID, err)
	}
	if _, err := tx.Exec(ctx, `SELECT pg_notify('bc_dispatch', node_id) FROM (SELECT DISTINCT node_id FROM commands WHERE batch_id = $1 AND state = 'pending') n`, b.ID); err != nil {
		return b, fmt.Errorf("waking the nodes of %s: %w", b.ID, err)
	}
	return b, event(ctx, tx, b, "command.batch.approved")
}

// Envelope is what a batched command travels with: the approval (the
// statement signed by the approvers) and its leaf's inclusion proof. ok is
// false while the batch is not approved (or was recorded without a quorum:
// then nothing is attached).
func Envelope(ctx context.Context, db store.DBTX, batchID, nodeID, kind string, payload []byte) (approval []byte, leafIndex int64, proof [][]byte, ok bool, err error) {
	b, err := getBy(ctx, db, `id = $1`, batchID)
	if err != nil {
		return nil, 0, nil, false, err
	}
	if b.State != StateApproved {
		return nil, 0, nil, false, nil
	}
	leaves, err := trustLeaves(b.Scope)
	if err != nil {
		return nil, 0, nil, false, err
	}
	tree, err := trust.NewTree(leaves)
	if err != nil {
		return nil, 0, nil, false, err
	}
	i, found := tree.Index(nodeID, kind, trust.PayloadDigest(payload))
	if !found {
		return nil, 0, nil, false, fmt.Errorf("batch %s holds no leaf for (%s, %s)", batchID, nodeID, kind)
	}
	if proof, err = tree.Proof(i); err != nil {
		return nil, 0, nil, false, err
	}
	s := trust.Signed{Body: b.Statement}
	for _, a := range b.Approvals {
		s.Signatures = append(s.Signatures, trust.Signature{KeyID: a.KeyID, Sig: a.Signature})
	}
	return s.Encode(), int64(i), proof, true, nil
}
