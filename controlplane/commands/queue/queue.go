// Package queue is the control plane's durable command queue in PostgreSQL.
// Commands are queued in the caller's transaction (invisible until it
// commits, NOTIFY sent inside it), numbered per node without gaps, settled by
// guarded UPDATEs that never move a state backwards, and announced through
// the event outbox in the same transaction as the change.
package queue

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/jackc/pgx/v5"

	"github.com/better-compute/commands/controlplane/commands/events"
	"github.com/better-compute/commands/controlplane/commands/kinds"
	"github.com/better-compute/commands/controlplane/internal/errcode"
	"github.com/better-compute/commands/controlplane/internal/ids"
	"github.com/better-compute/commands/internal/sealed"
	"github.com/better-compute/commands/sdk/kind"
)

// Queue queues, cancels, reads and transitions commands. It holds no
// connection: every method runs on the DBTX or transaction it is given.
type Queue struct {
	reg    *kinds.Registry
	logger hclog.Logger
	// requireBatch is set when the destructive-batch quorum is on and no
	// break-glass allowance exists: a destructive kind needs a batch id.
	requireBatch atomic.Bool
	nowFunc      func() time.Time
	// signer signs commands at enqueue; nil while signing is off.
	signer atomic.Pointer[Signer]
	// settleHook, when set, runs in every transaction that settles
	// commands (OnSettle, AlsoOnSettle: all of them as one).
	settleHook atomic.Pointer[SettleHook]
	// hookLock guards primaryHook and extraHooks, which settleHook joins.
	hookLock    sync.Mutex
	primaryHook SettleHook
	extraHooks  []SettleHook
}

// New returns a queue that checks kinds and payloads against reg.
func New(reg *kinds.Registry, logger hclog.Logger) *Queue {
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	return &Queue{reg: reg, logger: logger.Named("queue"), nowFunc: time.Now}
}

// Registry returns the kind registry the queue checks against.
func (q *Queue) Registry() *kinds.Registry { return q.reg }

// RequireBatches turns on the v1.0 destructive-batch quorum rule: with it, a
// destructive kind queued without a batch id is INVALID_STATE with reason
// batch-required, since every daemon would refuse it anyway.
func (q *Queue) RequireBatches(on bool) { q.requireBatch.Store(on) }

// settledEventSQL publishes command.settled for each row of the CTE u (a
// WHERE may follow): every statement that ends a command writes its event
// in the same statement, so the event exists exactly when the change does.
const settledEventSQL = `
  INSERT INTO outbox (tenant_id, topic, payload)
  SELECT tenant_id, '` + events.TopicCommandSettled + `',
    jsonb_build_object('commandId', id, 'nodeId', node_id, 'kind', kind, 'state', state, 'reason', reason)
  FROM u`

// Enqueue queues a command in tx. It returns the new command, or the one
// already queued under the same idempotency key with duplicate set; the same
// key for another kind is CONFLICT. An unknown kind is UNSUPPORTED, a payload
// its schema refuses is INVALID_INPUT naming the field, a deleted or unknown
// node (or one of another tenant) is NOT_FOUND, and a restricted identity
// that does not accept the kind, or a node whose role the kind's manifest
// does not name (a BMC kind runs on a site agent, not on the machine), is
// INVALID_STATE. A new command publishes
// node.command.queued. A new command costs two round trips (EnqueueSet of
// one): its seq with the duplicate check, and the insert of the row with
// its wire bytes (MarshalCommand), which need the seq and created_at.
func (q *Queue) Enqueue(ctx context.Context, tx pgx.Tx, p EnqueueParams) (cmd Command, duplicate bool, err error) {
	out, err := q.EnqueueSet(ctx, tx, []EnqueueParams{p})
	if err != nil {
		return Command{}, false, fmt.Errorf("enqueueing %s on %s: %w", p.Kind, p.NodeID, err)
	}
	return out[0].Command, out[0].Duplicate, out[0].Err
}

// Check runs Enqueue's checks of p that need no database (the kind, its
// payload against its schema, the batch id) without queuing anything: a
// caller that shares a transaction with others (commands.run's group commit)
// refuses a bad command before it joins the group, where its failure would
// cost the others a rollback, and a module checks a step it will queue
// later, so that a run that could not finish is refused whole.
func (q *Queue) Check(p EnqueueParams) error {
	_, _, err := q.check(p)
	return err
}

// check validates p against the registry and returns the kind's manifest and
// the payload to store.
func (q *Queue) check(p EnqueueParams) (kind.Manifest, []byte, error) {
	if p.NodeID == "" {
		return kind.Manifest{}, nil, errcode.Newf(errcode.InvalidInput, "missing-field", map[string]string{"field": "nodeId"}, "nodeId is required")
	}
	m, payload, err := q.CheckPayload(p.Kind, p.Payload)
	if err != nil {
		return kind.Manifest{}, nil, err
	}
	if err := sealed.ValidRefs(p.SecretRefs); err != nil {
		return kind.Manifest{}, nil, errcode.Newf(errcode.InvalidInput, "invalid-secret-ref", map[string]string{"field": "secretRefs"}, "secretRefs: %v", err)
	}
	if p.BatchID != "" && !ids.Valid(ids.Batch, p.BatchID) {
		return kind.Manifest{}, nil, errcode.Newf(errcode.InvalidInput, "invalid-batch-id", map[string]string{"field": "batchId"}, "batchId %q is not a batch_… id", p.BatchID)
	}
	if m.Flags.Destructive && p.BatchID == "" && q.requireBatch.Load() {
		return kind.Manifest{}, nil, errcode.Newf(errcode.InvalidState, "batch-required", map[string]string{"reason": "batch-required", "kind": p.Kind},
			"%s is destructive and the batch quorum is on: run it in an approved batch (batchId)", p.Kind)
	}
	return m, payload, nil
}

// CheckPayload checks that kind k is registered and that payload (nil is
// {}) satisfies its schema, and returns the manifest and the payload as it
// is stored: what check does of a command that does not depend on its node
// or batch (a fleet run checks its payload once, for all its nodes).
func (q *Queue) CheckPayload(k string, payload json.RawMessage) (kind.Manifest, []byte, error) {
	m, ok := q.reg.Get(k)
	if !ok {
		return kind.Manifest{}, nil, errcode.Newf(errcode.Unsupported, "unknown-kind", map[string]string{"kind": k}, "kind %q is not registered", k)
	}
	if len(bytes.TrimSpace(payload)) == 0 {
		payload = json.RawMessage("{}")
	}
	if err := q.reg.ValidatePayload(k, payload); err != nil {
		var pe *kind.PayloadError
		if errors.As(err, &pe) {
			field := pe.Field
			if field == "" {
				field = "(root)"
			}
			return kind.Manifest{}, nil, errcode.Newf(errcode.InvalidInput, "invalid-payload",
				map[string]string{"kind": k, "field": "payload" + pe.Field},
				"payload of %s: field %s: %s", k, field, pe.Problem)
		}
		return kind.Manifest{}, nil, fmt.Errorf("validating payload of %s: %w", k, err)
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, payload); err != nil {
		return kind.Manifest{}, nil, errcode.Newf(errcode.InvalidInput, "invalid-payload", map[string]string{"kind": k, "field": "payload"}, "payload is not JSON: %v", err)
	}
	return m, buf.Bytes(), nil
}

// enqueueMiss explains why the enqueue statement found no node row to bump.
func (q *Queue) enqueueMiss(ctx context.Context, tx pgx.Tx, p EnqueueParams, m kind.Manifest) error {
	var (
		tenant  string
		deleted bool
		allowed []string
		role    string
	)
	err := tx.QueryRow(ctx, `SELECT tenant_id, deleted_at IS NOT NULL, allowed_kinds, role FROM nodes WHERE id = $1`, p.NodeID).
		Scan(&tenant, &deleted, &allowed, &role)
	if errors.Is(err, pgx.ErrNoRows) || (err == nil && (deleted || (p.TenantID != "" && tenant != p.TenantID))) {
		return nodeNotFound(p.NodeID)
	}
	if err != nil {
		return fmt.Errorf("enqueueing %s on %s: reading node: %w", p.Kind, p.NodeID, err)
	}
	// A restricted identity's own list answers first (the spec's "runs a
	// restricted identity that does not accept …"), then the role.
	if allowed != nil && !slices.Contains(allowed, p.Kind) {
		return errcode.Newf(errcode.InvalidState, "restricted-identity", map[string]string{"kind": p.Kind, "nodeId": p.NodeID},
			"node %s runs a restricted identity that does not accept %s", p.NodeID, p.Kind)
	}
	if !m.AllowsRole(role) {
		return errcode.Newf(errcode.InvalidState, "role-not-allowed",
			map[string]string{"kind": p.Kind, "nodeId": p.NodeID, "role": role, "roles": strings.Join(m.Roles, ",")},
			"node %s runs role %s, and %s runs only on role %s: queue it on such an agent (a BMC kind on the site agent that reaches the BMC)",
			p.NodeID, role, p.Kind, strings.Join(m.Roles, " or "))
	}
	return fmt.Errorf("enqueueing %s on %s: the node row changed under the statement", p.Kind, p.NodeID)
}

func nodeNotFound(nodeID string) *errcode.Error {
	return errcode.Newf(errcode.NotFound, "node-not-found", map[string]string{"nodeId": nodeID}, "node %s not found", nodeID)
}

func commandNotFound(nodeID, commandID string) *errcode.Error {
	if nodeID == "" {
		return errcode.Newf(errcode.NotFound, "command-not-found", map[string]string{"commandId": commandID}, "command %s not found", commandID)
	}
	return errcode.Newf(errcode.NotFound, "command-not-found", map[string]string{"nodeId": nodeID, "commandId": commandID}, "command %s not found on node %s", commandID, nodeID)
}
