package api

import (
	"strconv"
	"strings"

	"github.com/better-compute/commands/controlplane/fleet/labels"
	"github.com/better-compute/commands/controlplane/fleet/nodehealth"
	"github.com/better-compute/commands/controlplane/trust/auth"
	apiv1 "github.com/better-compute/commands/proto/bc/api/v1"
)

// maxQueryLen bounds nodes.list's text search.
const maxQueryLen = 200

// nodeFilter is what nodes.list keeps: every set field must hold (AND).
type nodeFilter struct {
	pool        string
	sel         labels.Selector
	condition   string
	connected   *bool
	healthy     *bool
	query       string
	failedCheck string
}

// nodeFilterOf checks a request's filters: a wrong one is INVALID_INPUT
// naming the field and what it takes.
func nodeFilterOf(req *apiv1.ListNodesRequest, sel labels.Selector) (nodeFilter, error) {
	f := nodeFilter{pool: req.GetPool(), sel: sel, condition: req.GetCondition(), query: strings.TrimSpace(req.GetQuery()), failedCheck: req.GetFailedCheck()}
	if f.pool != "" {
		if err := validID("pool", f.pool); err != nil {
			return f, err
		}
	}
	if req.Connected != nil {
		v := req.GetConnected()
		f.connected = &v
	}
	switch req.GetHealth() {
	case "":
	case "healthy", "unhealthy":
		v := req.GetHealth() == "healthy"
		f.healthy = &v
	default:
		return f, invalid("health", "health is healthy or unhealthy (or unset for both), not "+strconv.Quote(req.GetHealth()))
	}
	if f.condition != "" {
		if err := auth.CheckID("condition", f.condition); err != nil {
			return f, err
		}
	}
	if f.failedCheck != "" {
		if err := auth.CheckID("failedCheck", f.failedCheck); err != nil {
			return f, err
		}
	}
	if len(f.query) > maxQueryLen {
		return f, invalid("query", "query is at most "+strconv.Itoa(maxQueryLen)+" characters")
	}
	return f, nil
}

// sql is the filter as a condition on a row of nodes (no alias), with its
// arguments numbered from $next.
func (f nodeFilter) sql(next int) (string, []any) {
	var (
		parts []string
		args  []any
	)
	arg := func(v any) string {
		args = append(args, v)
		return "$" + strconv.Itoa(next+len(args)-1)
	}
	if f.pool != "" {
		parts = append(parts, "pool = "+arg(f.pool))
	}
	if len(f.sel.Requirements) > 0 {
		cond, sargs := f.sel.SQL("labels", next+len(args))
		args = append(args, sargs...)
		parts = append(parts, cond)
	}
	if f.condition != "" {
		parts = append(parts, "conditions @> jsonb_build_array(jsonb_build_object('type', "+arg(f.condition)+"::text, 'status', 'True'))")
	}
	if f.connected != nil {
		parts = append(parts, connectedSQL+" = "+arg(*f.connected))
	}
	if f.healthy != nil {
		u := nodehealth.UnhealthySQL("")
		if *f.healthy {
			parts = append(parts, "NOT "+u)
		} else {
			parts = append(parts, u)
		}
	}
	if f.failedCheck != "" {
		parts = append(parts, "failed_checks @> ARRAY["+arg(f.failedCheck)+"::text]")
	}
	if f.query != "" {
		p := arg("%" + likeEscape(f.query) + "%")
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
