package labels

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/better-compute/commands/controlplane/commands/events"
	"github.com/better-compute/commands/controlplane/internal/errcode"
	"github.com/better-compute/commands/controlplane/internal/store"
)

// SQL compiles the selector into a condition on col (a jsonb column of
// labels, "n.labels"), with its arguments numbered from $next. Equality
// uses containment (@>) and existence the ? operator, which the nodes'
// GIN index answers.
func (s Selector) SQL(col string, next int) (cond string, args []any) {
	if len(s.Requirements) == 0 {
		return "true", nil
	}
	arg := func(v any) string {
		args = append(args, v)
		return "$" + strconv.Itoa(next+len(args)-1)
	}
	var parts []string
	for _, r := range s.Requirements {
		switch r.Op {
		case OpEquals:
			doc, _ := json.Marshal(map[string]string{r.Key: r.Values[0]})
			parts = append(parts, col+" @> "+arg(string(doc))+"::jsonb")
		case OpNotEquals:
			parts = append(parts, "("+col+" ->> "+arg(r.Key)+"::text) IS DISTINCT FROM "+arg(r.Values[0])+"::text")
		case OpIn:
			// COALESCE: a node without the key is false, not NULL, so the
			// condition stays two-valued wherever it is composed.
			parts = append(parts, "COALESCE(("+col+" ->> "+arg(r.Key)+"::text) = ANY ("+arg(r.Values)+"::text[]), false)")
		case OpNotIn:
			k := arg(r.Key)
			parts = append(parts, "(("+col+" ->> "+k+"::text) IS NULL OR NOT (("+col+" ->> "+k+"::text) = ANY ("+arg(r.Values)+"::text[])))")
		case OpExists:
			parts = append(parts, col+" ? "+arg(r.Key)+"::text")
		case OpNotExists:
			parts = append(parts, "NOT ("+col+" ? "+arg(r.Key)+"::text)")
		}
	}
	return strings.Join(parts, " AND "), args
}

// UnknownKeys returns the keys of keys that no live node of the tenant
// carries.
func UnknownKeys(ctx context.Context, db store.DBTX, tenantID string, keys []string) ([]string, error) {
	if len(keys) == 0 {
		return nil, nil
	}
	rows, err := db.Query(ctx, `SELECT k FROM unnest($2::text[]) AS k
		WHERE NOT EXISTS (SELECT 1 FROM nodes n WHERE n.tenant_id = $1 AND n.deleted_at IS NULL AND n.labels ? k)`, tenantID, keys)
	if err != nil {
		return nil, fmt.Errorf("looking up label keys: %w", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("looking up label keys: %w", err)
	}
	return out, nil
}

// CheckKnown refuses, INVALID_INPUT naming it, a selector key that no node
// of the tenant carries: most likely a typo, and a run over it would
// select nothing.
func CheckKnown(ctx context.Context, db store.DBTX, tenantID string, sel Selector) error {
	unknown, err := UnknownKeys(ctx, db, tenantID, sel.Keys())
	if err != nil {
		return err
	}
	if len(unknown) > 0 {
		return &errcode.Error{Code: errcode.InvalidInput, Reason: "unknown-label-key",
			Message: fmt.Sprintf("no node of tenant %s carries the label key(s) %s: set them with better-compute nodes label, or check the selector", tenantID, strings.Join(unknown, ", ")),
			Details: map[string]string{"field": "selector", "keys": strings.Join(unknown, ",")}}
	}
	return nil
}

// ErrNodeNotFound is Set's answer for a node the tenant cannot see.
var ErrNodeNotFound = errors.New("node not found")

// TopicLabelsSet is the event a change of a node's labels publishes.
const TopicLabelsSet = "node.labels.set"

// Set changes a node's labels in tx and publishes node.labels.set; it
// returns the node's labels after the change. The node's row is locked, so
// two changes take turns.
func Set(ctx context.Context, tx pgx.Tx, tenantID, nodeID string, c Change, by string) (map[string]string, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	var raw []byte
	err := tx.QueryRow(ctx, `SELECT labels FROM nodes WHERE id = $1 AND tenant_id = $2 AND deleted_at IS NULL FOR UPDATE`, nodeID, tenantID).Scan(&raw)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("%w: %s", ErrNodeNotFound, nodeID)
	}
	if err != nil {
		return nil, fmt.Errorf("reading the labels of %s: %w", nodeID, err)
	}
	cur := map[string]string{}
	if err := json.Unmarshal(raw, &cur); err != nil {
		return nil, fmt.Errorf("decoding the labels of %s: %w", nodeID, err)
	}
	next := c.Apply(cur)
	if len(next) > MaxPerNode {
		return nil, invalid("labels", "node %s would carry %d labels; at most %d", nodeID, len(next), MaxPerNode)
	}
	doc, err := json.Marshal(next)
	if err != nil {
		return nil, fmt.Errorf("encoding labels: %w", err)
	}
	if _, err := tx.Exec(ctx, `UPDATE nodes SET labels = $2 WHERE id = $1`, nodeID, doc); err != nil {
		return nil, fmt.Errorf("storing the labels of %s: %w", nodeID, err)
	}
	if err := events.Write(ctx, tx, tenantID, TopicLabelsSet, map[string]any{"nodeId": nodeID, "labels": next, "by": by}); err != nil {
		return nil, err
	}
	return next, nil
}
