package api

import (
	"strconv"
	"strings"

	"github.com/better-compute/commands/controlplane/fleet/labels"
	"github.com/better-compute/commands/controlplane/fleet/nodes"
	"github.com/better-compute/commands/controlplane/trust/auth"
	apiv1 "github.com/better-compute/commands/proto/bc/api/v1"
)

// maxQueryLen bounds nodes.list's text search.
const maxQueryLen = 200

// nodeFilterOf checks a request's filters and makes them what nodes.List
// keeps: a wrong one is INVALID_INPUT naming the field and what it takes.
func nodeFilterOf(req *apiv1.ListNodesRequest, sel labels.Selector) (nodes.Filter, error) {
	f := nodes.Filter{Pool: req.GetPool(), Selector: sel, Condition: req.GetCondition(), Query: strings.TrimSpace(req.GetQuery()), FailedCheck: req.GetFailedCheck()}
	if f.Pool != "" {
		if err := validID("pool", f.Pool); err != nil {
			return f, err
		}
	}
	if req.Connected != nil {
		v := req.GetConnected()
		f.Connected = &v
	}
	switch req.GetHealth() {
	case "":
	case "healthy", "unhealthy":
		v := req.GetHealth() == "healthy"
		f.Healthy = &v
	default:
		return f, invalid("health", "health is healthy or unhealthy (or unset for both), not "+strconv.Quote(req.GetHealth()))
	}
	if f.Condition != "" {
		if err := auth.CheckID("condition", f.Condition); err != nil {
			return f, err
		}
	}
	if f.FailedCheck != "" {
		if err := auth.CheckID("failedCheck", f.FailedCheck); err != nil {
			return f, err
		}
	}
	if len(f.Query) > maxQueryLen {
		return f, invalid("query", "query is at most "+strconv.Itoa(maxQueryLen)+" characters")
	}
	return f, nil
}
