package nodes

import (
	"strconv"
	"strings"

	"github.com/better-compute/commands/controlplane/fleet/labels"
	"github.com/better-compute/commands/controlplane/fleet/nodehealth"
)

// Filter is what List keeps: every set field must hold (AND). The caller
// checks the fields (the API refuses a malformed one naming it); the zero
// Filter keeps every node.
type Filter struct {
	// Pool keeps the nodes of one pool.
	Pool string
	// Selector keeps the nodes whose labels it selects.
	Selector labels.Selector
	// Condition keeps the nodes that report the condition type True.
	Condition string
	// Connected, when set, keeps the nodes whose session is (or is not)
	// open (Row.Connected).
	Connected *bool
	// Healthy, when set, keeps the nodes nodehealth calls healthy (or not).
	Healthy *bool
	// Query keeps the nodes whose id, pool or a label value holds it,
	// case-insensitive; a LIKE wildcard in it is a plain character.
	Query string
	// FailedCheck keeps the nodes whose latest diag.nvml failed the check.
	FailedCheck string
}

// sql is the filter as a condition on a row of nodes (no alias), with its
// arguments numbered from $next.
func (f Filter) sql(next int) (string, []any) {
	var (
		parts []string
		args  []any
	)
	arg := func(v any) string {
		args = append(args, v)
		return "$" + strconv.Itoa(next+len(args)-1)
	}
	if f.Pool != "" {
		parts = append(parts, "pool = "+arg(f.Pool))
	}
	if len(f.Selector.Requirements) > 0 {
		cond, sargs := f.Selector.SQL("labels", next+len(args))
		args = append(args, sargs...)
		parts = append(parts, cond)
	}
	if f.Condition != "" {
		parts = append(parts, "conditions @> jsonb_build_array(jsonb_build_object('type', "+arg(f.Condition)+"::text, 'status', 'True'))")
	}
	if f.Connected != nil {
		parts = append(parts, connectedSQL+" = "+arg(*f.Connected))
	}
	if f.Healthy != nil {
		u := nodehealth.UnhealthySQL("")
		if *f.Healthy {
			parts = append(parts, "NOT "+u)
		} else {
			parts = append(parts, u)
		}
	}
	if f.FailedCheck != "" {
		parts = append(parts, "failed_checks @> ARRAY["+arg(f.FailedCheck)+"::text]")
	}
	if f.Query != "" {
		p := arg("%" + likeEscape(f.Query) + "%")
		parts = append(parts, "(id ILIKE "+p+" OR pool ILIKE "+p+" OR EXISTS (SELECT 1 FROM jsonb_each_text(labels) l WHERE l.value ILIKE "+p+"))")
	}
	if len(parts) == 0 {
		return "true", nil
	}
	return strings.Join(parts, " AND "), args
}

// likeEscape makes s match itself in a LIKE pattern.
func likeEscape(s string) string {
	return strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`).Replace(s)
}
