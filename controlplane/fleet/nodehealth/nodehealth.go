// Package nodehealth says whether a node is healthy, one rule for the
// API's Node.healthy, nodes.list's health filter and fleet.summary's
// counts: a node is unhealthy while it reports a problem condition or its
// latest settled diag.nvml failed a check. The rule is written twice, as
// SQL (filters and counts over thousands of nodes) and as Go (one node's
// row), and a test holds the two to agree on real PostgreSQL.
//
// The verdict of the latest diag.nvml lives on the node's row
// (failed_checks, checked_at), written by SettleHook in the transaction
// that settles the diag, so that no query at fleet size reads the
// commands' history.
package nodehealth

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/better-compute/commands/controlplane/commands/queue"
)

// DiagKind is the kind whose checks judge a node's GPUs.
const DiagKind = "diag.nvml"

// positive are the condition types whose True is good news (the node holds
// a trust bundle; its node spec is applied), with every type named
// …Healthy or …Ready (GPUHealthy, as Kubernetes' Ready). Every other
// condition a node reports (RebootRequired, ClockSkew, a plugin's own)
// says True when something needs a person or a remediation.
var positive = []string{"TrustBundle", "NodeSpec"}

// isPositive says whether a condition type is good news when True.
func isPositive(typ string) bool {
	return slices.Contains(positive, typ) || strings.HasSuffix(typ, "Healthy") || strings.HasSuffix(typ, "Ready")
}

// Condition is a condition as the nodes table stores it.
type Condition struct {
	Type   string `json:"type"`
	Status string `json:"status"`
	Reason string `json:"reason"`
}

// Problem says whether c makes its node unhealthy: a condition True that
// is not a positive one, or a positive one False, except a TrustBundle that
// is False because the control plane sends none ("none": commands go
// unsigned, which the server's own warning covers, not each node).
func Problem(c Condition) bool {
	pos := isPositive(c.Type)
	switch {
	case c.Status == "True":
		return !pos
	case c.Status == "False" && c.Type == "TrustBundle":
		return c.Reason != "none"
	case c.Status == "False":
		return pos
	}
	return false
}

// Healthy is the rule on one node's row: conds is its conditions column
// (a JSON array), failed its failed_checks.
func Healthy(conds []byte, failed []string) (bool, error) {
	if len(failed) > 0 {
		return false, nil
	}
	if len(conds) == 0 {
		return true, nil
	}
	var cs []Condition
	if err := json.Unmarshal(conds, &cs); err != nil {
		return false, fmt.Errorf("decoding conditions: %w", err)
	}
	for _, c := range cs {
		if Problem(c) {
			return false, nil
		}
	}
	return true, nil
}

// ProblemSQL is Problem on one element c of a conditions array.
const ProblemSQL = `((c->>'status' = 'True' AND NOT ` + positiveSQL + `)
	OR (c->>'status' = 'False' AND ` + positiveSQL + ` AND c->>'type' <> 'TrustBundle')
	OR (c->>'status' = 'False' AND c->>'type' = 'TrustBundle' AND coalesce(c->>'reason', '') <> 'none'))`

// positiveSQL is isPositive on c's type.
const positiveSQL = `(c->>'type' IN ('TrustBundle', 'NodeSpec') OR c->>'type' LIKE '%Healthy' OR c->>'type' LIKE '%Ready')`

// UnhealthySQL is the rule as a condition on a row of nodes whose columns
// are prefixed with prefix ("n." or "").
func UnhealthySQL(prefix string) string {
	return `(cardinality(` + prefix + `failed_checks) > 0 OR EXISTS (SELECT 1 FROM jsonb_array_elements(
		CASE WHEN jsonb_typeof(` + prefix + `conditions) = 'array' THEN ` + prefix + `conditions ELSE '[]'::jsonb END) c WHERE ` + ProblemSQL + `))`
}

// settleSQL records, for each settled diag.nvml among the ids, the checks
// it failed on its node's row, unless a later diag is already recorded. A
// diag that ended without a report of checks (rejected, expired, cancelled,
// a failure before any check ran) changes nothing: it judged nothing.
const settleSQL = `UPDATE nodes n SET failed_checks = d.failed, checked_at = d.settled_at
	FROM (SELECT DISTINCT ON (c.node_id) c.node_id, c.settled_at,
	        ARRAY(SELECT DISTINCT ch->>'check' FROM jsonb_array_elements(c.result->'checks') ch
	              WHERE ch->>'status' = 'fail' AND ch->>'check' IS NOT NULL ORDER BY 1) AS failed
	      FROM commands c
	      WHERE c.id = ANY($1) AND c.kind = '` + DiagKind + `' AND c.settled_at IS NOT NULL
	        AND jsonb_typeof(c.result->'checks') = 'array'
	      ORDER BY c.node_id, c.settled_at DESC) d
	WHERE n.id = d.node_id AND (n.checked_at IS NULL OR n.checked_at <= d.settled_at)`

// SettleHook keeps each node's latest diag.nvml verdict on its row, in the
// transaction that settles the diag (queue.AlsoOnSettle). Settles of other
// kinds cost nothing.
func SettleHook(ctx context.Context, tx pgx.Tx, settled []queue.Command) error {
	var ids []string
	for _, c := range settled {
		// A path that did not read the kind back is given the benefit:
		// the statement filters by kind itself.
		if c.Kind == DiagKind || c.Kind == "" {
			ids = append(ids, c.ID)
		}
	}
	if len(ids) == 0 {
		return nil
	}
	if _, err := tx.Exec(ctx, settleSQL, ids); err != nil {
		return fmt.Errorf("recording the diag.nvml verdict of %d command(s): %w", len(ids), err)
	}
	return nil
}
