package remediation

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/better-compute/commands/controlplane/internal/store"
)

// The states of a remediation.
const (
	StateWaiting    = "waiting"
	StateRunning    = "running"
	StateVerifying  = "verifying"
	StateDone       = "done"
	StateFailed     = "failed"
	StateEscalated  = "escalated"
	StateSuperseded = "superseded"
	StateCancelled  = "cancelled"
)

// The outcomes of a finished remediation.
const (
	OutcomeVerified   = "verified"
	OutcomeFailed     = "failed"
	OutcomeUnverified = "unverified"
	OutcomeEscalated  = "escalated"
)

// Row is one remediation: the platform's planned or running action on one
// node (and GPU for a reset).
type Row struct {
	ID, NodeID, TenantID, Pool string
	// Owner is the module: provision or health.
	Owner string
	// Action is the kind it sends (gpu.reset, node.reboot); GPU the GPU a
	// reset targets.
	Action, GPU string
	// Trigger is the condition that asked for it; TriggerMessage its words.
	Trigger, TriggerMessage string
	State                   string
	// WaitingReason and WaitingMessage say what a waiting one waits for.
	WaitingReason, WaitingMessage string
	Attempt                       int
	BatchID, CommandID            string
	VerifyCommandID, BootIDBefore string
	Outcome, OutcomeMessage       string
	SupersededBy                  string
	CreatedAt, UpdatedAt          time.Time
	StartedAt, FinishedAt         *time.Time
}

// Open reports whether the row is still waiting, running or verifying.
func (r Row) Open() bool {
	return r.State == StateWaiting || r.State == StateRunning || r.State == StateVerifying
}

const rowColumns = `id, node_id, tenant_id, pool, owner, action, gpu, trigger, trigger_message, state, waiting_reason, waiting_message,
  attempt, batch_id, command_id, verify_command_id, boot_id_before, outcome, outcome_message, superseded_by, created_at, updated_at, started_at, finished_at`

func scanRow(row pgx.Row) (Row, error) {
	var r Row
	err := row.Scan(&r.ID, &r.NodeID, &r.TenantID, &r.Pool, &r.Owner, &r.Action, &r.GPU, &r.Trigger, &r.TriggerMessage, &r.State,
		&r.WaitingReason, &r.WaitingMessage, &r.Attempt, &r.BatchID, &r.CommandID, &r.VerifyCommandID, &r.BootIDBefore,
		&r.Outcome, &r.OutcomeMessage, &r.SupersededBy, &r.CreatedAt, &r.UpdatedAt, &r.StartedAt, &r.FinishedAt)
	return r, err
}

func collect(rows pgx.Rows, err error) ([]Row, error) {
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (Row, error) { return scanRow(r) })
}

// ListParams select remediations.
type ListParams struct {
	TenantID string
	// Pool, when set, filters on it.
	Pool string
	// NodeID, when set, filters on it.
	NodeID string
	// IncludeFinished adds those finished in the last 7 days.
	IncludeFinished bool
}

// List returns the tenant's open remediations (and, with IncludeFinished,
// the ones finished in the last 7 days), oldest first.
func List(ctx context.Context, db store.DBTX, p ListParams) ([]Row, error) {
	out, err := collect(db.Query(ctx, `SELECT `+rowColumns+` FROM remediations
		WHERE tenant_id = $1 AND ($2 = '' OR pool = $2) AND ($3 = '' OR node_id = $3)
		  AND (state IN ('waiting', 'running', 'verifying') OR ($4 AND finished_at > now() - interval '7 days'))
		ORDER BY created_at, id LIMIT 1000`, p.TenantID, p.Pool, p.NodeID, p.IncludeFinished))
	if err != nil {
		return nil, fmt.Errorf("listing remediations: %w", err)
	}
	return out, nil
}

// Get returns remediation id.
func Get(ctx context.Context, db store.DBTX, id string) (Row, error) {
	r, err := scanRow(db.QueryRow(ctx, `SELECT `+rowColumns+` FROM remediations WHERE id = $1`, id))
	if err != nil {
		return Row{}, fmt.Errorf("reading remediation %s: %w", id, err)
	}
	return r, nil
}

// PlatformRequesterPrefix starts the requester of every batch the platform
// creates for its own destructive work ("platform:provision",
// "platform:health").
const PlatformRequesterPrefix = "platform:"

// ReasonGPUUnhealthy is gpu.reset's failure when every reset ran but a
// fresh query shows the GPU still unhealthy (plugins/gpureset's
// ReasonUnhealthy): the remediation escalates rather than failing.
const ReasonGPUUnhealthy = "gpu-unhealthy"

// ConditionEscalated is the node condition of a remediation that escalated
// (a reset that did not clear its GPU's condition, or a node remediated
// too often): True while one escalated within the last 7 days.
const ConditionEscalated = "RemediationEscalated"

// Condition is a node condition the remediations add to what the node
// reports.
type Condition struct {
	Type, Status, Reason, Message string
	Since                         time.Time
}

// NodeConditions returns the node's remediation conditions: one
// RemediationEscalated per trigger escalated within the last 7 days.
func NodeConditions(ctx context.Context, db store.DBTX, nodeID string) ([]Condition, error) {
	m, err := NodesConditions(ctx, db, []string{nodeID})
	if err != nil {
		return nil, err
	}
	return m[nodeID], nil
}

// NodesConditions is NodeConditions for many nodes in one statement (a
// nodes.list page), by node id; a node without any is absent.
func NodesConditions(ctx context.Context, db store.DBTX, nodeIDs []string) (map[string][]Condition, error) {
	rows, err := collect(db.Query(ctx, `SELECT DISTINCT ON (node_id) `+rowColumns+` FROM remediations
		WHERE node_id = ANY($1) AND state = 'escalated' AND finished_at > now() - interval '7 days'
		ORDER BY node_id, finished_at DESC`, nodeIDs))
	if err != nil {
		return nil, fmt.Errorf("reading the remediation conditions of %d node(s): %w", len(nodeIDs), err)
	}
	out := map[string][]Condition{}
	for _, r := range rows {
		out[r.NodeID] = append(out[r.NodeID], Condition{Type: ConditionEscalated, Status: "True", Reason: r.Trigger, Message: r.OutcomeMessage, Since: *r.FinishedAt})
	}
	return out, nil
}
