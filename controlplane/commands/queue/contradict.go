package queue

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/better-compute/commands/controlplane/commands/events"
)

// TopicReportContradicted is the event of a node's terminal report that
// contradicts the terminal state already stored.
const TopicReportContradicted = "command.report.contradicted"

// Contradiction is a node's terminal report that came after the command was
// already settled another way: the forward-only rule keeps the first state,
// and this is stored beside it.
type Contradiction struct {
	CommandID, NodeID, TenantID, Kind string
	// StoredState and StoredReason are what the command keeps.
	StoredState  State
	StoredReason string
	// ReportedState, ReportedReason and ReportedMessage are what the node
	// reported later; Result its result document.
	ReportedState   State
	ReportedReason  string
	ReportedMessage string
	Result          json.RawMessage
	ReportedAt      time.Time
}

// Contradicts reports whether the terminal report t says something else
// than the terminal command cur: another state or another reason. A repeat
// of the report that settled cur does not.
func Contradicts(cur Command, t Transition) bool {
	return cur.State.Terminal() && t.To.Terminal() && (t.To != cur.State || t.Reason != cur.Reason)
}

// RecordContradiction stores the terminal report t that contradicts the
// already terminal command cur (Contradicts), in one transaction: the row
// beside the command, command.report.contradicted, and the command's owner
// wake (the settle hook, told of cur as it is stored), so that a module
// acts on the news. A repeat of the same report records nothing and
// reports false.
func (q *Queue) RecordContradiction(ctx context.Context, db DBTX, cur Command, t Transition) (bool, error) {
	if !Contradicts(cur, t) {
		return false, nil
	}
	recorded := false
	err := q.settling(ctx, db, func(db DBTX) ([]Command, error) {
		var result any
		if len(t.Result) > 0 {
			result = string(t.Result)
		}
		tag, err := db.Exec(ctx, `INSERT INTO command_contradictions (command_id, node_id, tenant_id, kind, stored_state, stored_reason,
			reported_state, reported_reason, reported_message, result)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10::jsonb) ON CONFLICT DO NOTHING`,
			cur.ID, cur.NodeID, cur.TenantID, cur.Kind, string(cur.State), cur.Reason, string(t.To), t.Reason, t.Message, result)
		if err != nil {
			return nil, fmt.Errorf("recording the contradicting report of %s: %w", cur.ID, err)
		}
		if tag.RowsAffected() == 0 {
			return nil, nil
		}
		recorded = true
		if err := events.Write(ctx, db, cur.TenantID, TopicReportContradicted, map[string]any{
			"commandId": cur.ID, "nodeId": cur.NodeID, "kind": cur.Kind,
			"storedState": cur.State, "storedReason": cur.Reason,
			"reportedState": t.To, "reportedReason": t.Reason, "reportedMessage": t.Message,
		}); err != nil {
			return nil, err
		}
		return []Command{cur}, nil
	})
	if err != nil {
		return false, err
	}
	if recorded {
		q.logger.Warn("a report contradicts the stored outcome; stored beside it", "command_id", cur.ID, "node_id", cur.NodeID, "kind", cur.Kind,
			"stored", cur.State, "stored_reason", cur.Reason, "reported", t.To, "reported_reason", t.Reason)
	}
	return recorded, nil
}

// Contradictions returns the contradicting reports stored for a command,
// oldest first.
func (q *Queue) Contradictions(ctx context.Context, db DBTX, commandID string) ([]Contradiction, error) {
	return scanContradictions(db.Query(ctx, `SELECT `+contradictionColumns+` FROM command_contradictions WHERE command_id = $1 ORDER BY reported_at`, commandID))
}

// NodesContradictions returns, by node, the contradicting reports of the
// last 7 days that no later success of the same kind on the node has
// answered: what the nodes' conditions show (one statement for a page).
func NodesContradictions(ctx context.Context, db DBTX, nodeIDs []string) (map[string][]Contradiction, error) {
	list, err := scanContradictions(db.Query(ctx, `SELECT `+contradictionColumns+` FROM command_contradictions x
		WHERE x.node_id = ANY($1) AND x.reported_at > now() - interval '7 days'
		  AND NOT EXISTS (SELECT 1 FROM commands c WHERE c.node_id = x.node_id AND c.kind = x.kind AND c.id <> x.command_id
		                  AND c.state = 'succeeded' AND c.settled_at > x.reported_at)
		ORDER BY x.node_id, x.reported_at`, nodeIDs))
	if err != nil {
		return nil, err
	}
	out := map[string][]Contradiction{}
	for _, c := range list {
		out[c.NodeID] = append(out[c.NodeID], c)
	}
	return out, nil
}

const contradictionColumns = `command_id, node_id, tenant_id, kind, stored_state, stored_reason, reported_state, reported_reason,
  reported_message, result, reported_at`

type rowsLike interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
	Close()
}

func scanContradictions(rows rowsLike, err error) ([]Contradiction, error) {
	if err != nil {
		return nil, fmt.Errorf("reading contradicting reports: %w", err)
	}
	defer rows.Close()
	var out []Contradiction
	for rows.Next() {
		var (
			c                Contradiction
			stored, reported string
			result           []byte
		)
		if err := rows.Scan(&c.CommandID, &c.NodeID, &c.TenantID, &c.Kind, &stored, &c.StoredReason, &reported, &c.ReportedReason,
			&c.ReportedMessage, &result, &c.ReportedAt); err != nil {
			return nil, fmt.Errorf("reading contradicting reports: %w", err)
		}
		c.StoredState, c.ReportedState, c.Result = State(stored), State(reported), result
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("reading contradicting reports: %w", err)
	}
	return out, nil
}
