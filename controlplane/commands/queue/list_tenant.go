package queue

import (
	"context"
	"encoding/base64"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/better-compute/commands/controlplane/internal/errcode"
)

// TenantListParams select a page of a tenant's commands across its nodes.
type TenantListParams struct {
	TenantID string
	// NodePatterns, when not nil, keeps only the commands of nodes whose
	// resource name (compute-node/{nodeId}) matches one of them: the
	// caller's read grants, '*' matching any run of characters. An empty
	// non-nil slice lists nothing.
	NodePatterns []string
	// NodeID keeps one node's commands (newest first by creation, unlike
	// List's order by seq).
	NodeID                                  string
	State                                   State
	Kind, Reason, RunID, BatchID, Requester string
	Since, Until, SettledSince              time.Time
	Limit                                   int
	Cursor                                  string
}

// ListTenant returns one page of a tenant's commands, newest first by
// creation (then id), filtered as p says, with an opaque cursor for the
// next page ("" on the last). It reads commands_tenant_created (migration
// 0090) from the newest row (or the cursor's) down, so a page costs the
// rows it reads past the filters, not the table's size; a time range bounds
// that read. p.SettledSince with p.State reads commands_tenant_state_settled
// instead: the failures of the last hour without its successes.
func (q *Queue) ListTenant(ctx context.Context, db DBTX, p TenantListParams) (items []Command, next string, err error) {
	if p.TenantID == "" {
		return nil, "", errcode.Newf(errcode.InvalidInput, "missing-field", map[string]string{"field": "tenantId"}, "tenantId is required")
	}
	if p.State != "" && !p.State.Valid() {
		return nil, "", errcode.Newf(errcode.InvalidInput, "invalid-state", map[string]string{"field": "state", "state": string(p.State)}, "state %q is not a command state (%s)", p.State, statesList())
	}
	if !p.Since.IsZero() && !p.Until.IsZero() && !p.Until.After(p.Since) {
		return nil, "", errcode.Newf(errcode.InvalidInput, "invalid-time-range", map[string]string{"field": "until"}, "until (%s) must be after since (%s)", p.Until.UTC().Format(time.RFC3339), p.Since.UTC().Format(time.RFC3339))
	}
	limit, err := pageLimit(p.Limit)
	if err != nil {
		return nil, "", err
	}
	cur, err := decodeTenantCursor(p.Cursor)
	if err != nil {
		return nil, "", errcode.Newf(errcode.InvalidInput, "invalid-cursor", map[string]string{"field": "cursor"}, "%v", err)
	}
	if p.NodePatterns != nil && len(p.NodePatterns) == 0 {
		return nil, "", nil
	}
	args := []any{p.TenantID}
	arg := func(v any) string {
		args = append(args, v)
		return "$" + strconv.Itoa(len(args))
	}
	where := []string{"c.tenant_id = $1"}
	if p.NodePatterns != nil {
		likes := make([]string, len(p.NodePatterns))
		for i, pat := range p.NodePatterns {
			likes[i] = GlobToLike(pat)
		}
		where = append(where, "('compute-node/' || c.node_id) LIKE ANY ("+arg(likes)+"::text[])")
	}
	// In a fixed order: the same filters make the same statement text,
	// which the statement and plan caches key on.
	for _, f := range []struct{ col, v string }{{"c.node_id", p.NodeID}, {"c.state", string(p.State)}, {"c.kind", p.Kind},
		{"c.reason", p.Reason}, {"c.batch_id", p.BatchID}, {"c.requester", p.Requester}} {
		if f.v != "" {
			where = append(where, f.col+" = "+arg(f.v))
		}
	}
	if p.RunID != "" {
		where = append(where, "c.id IN (SELECT t.command_id FROM fleet_run_targets t WHERE t.run_id = "+arg(p.RunID)+" AND t.command_id IS NOT NULL)")
	}
	if !p.Since.IsZero() {
		where = append(where, "c.created_at >= "+arg(p.Since))
	}
	if !p.Until.IsZero() {
		where = append(where, "c.created_at < "+arg(p.Until))
	}
	if !p.SettledSince.IsZero() {
		where = append(where, "c.settled_at >= "+arg(p.SettledSince))
	}
	if cur.id != "" {
		where = append(where, "(c.created_at, c.id) < ("+arg(cur.at)+", "+arg(cur.id)+")")
	}
	sql := `SELECT ` + commandColumns("c") + ` FROM commands c WHERE ` + strings.Join(where, " AND ") +
		` ORDER BY c.created_at DESC, c.id DESC LIMIT ` + arg(limit+1)
	rows, err := db.Query(ctx, sql, args...)
	if err != nil {
		return nil, "", fmt.Errorf("listing the commands of tenant %s: %w", p.TenantID, err)
	}
	items, err = scanCommandsSized(rows, limit+1)
	if err != nil {
		return nil, "", err
	}
	if len(items) > limit {
		items = items[:limit]
		last := items[limit-1]
		next = encodeTenantCursor(last.CreatedAt, last.ID)
	}
	return items, next, nil
}

// GetInTenant returns command commandID of the tenant, on any of its
// nodes: commands.get by id alone. Another tenant's command is NOT_FOUND.
func (q *Queue) GetInTenant(ctx context.Context, db DBTX, tenantID, commandID string) (Command, error) {
	c, err := q.Get(ctx, db, "", commandID)
	if err != nil {
		return Command{}, err
	}
	if c.TenantID != tenantID {
		return Command{}, commandNotFound("", commandID)
	}
	return c, nil
}

func statesList() string {
	s := make([]string, len(States))
	for i, v := range States {
		s[i] = string(v)
	}
	return strings.Join(s, ", ")
}

// GlobToLike turns a grant pattern ('*' any run of characters) into a LIKE
// pattern, escaping LIKE's own wildcards.
func GlobToLike(p string) string {
	r := strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`, `*`, `%`)
	return r.Replace(p)
}

type tenantCursor struct {
	at time.Time
	id string
}

const tenantCursorPrefix = "at:"

func encodeTenantCursor(at time.Time, id string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(tenantCursorPrefix + strconv.FormatInt(at.UnixMicro(), 10) + ":" + id))
}

func decodeTenantCursor(c string) (tenantCursor, error) {
	if c == "" {
		return tenantCursor{}, nil
	}
	b, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil {
		return tenantCursor{}, fmt.Errorf("malformed cursor %q", c)
	}
	rest, ok := strings.CutPrefix(string(b), tenantCursorPrefix)
	if !ok {
		return tenantCursor{}, fmt.Errorf("malformed cursor %q: not a cursor of the tenant's list (a node's list has its own)", c)
	}
	us, id, ok := strings.Cut(rest, ":")
	n, err := strconv.ParseInt(us, 10, 64)
	if !ok || err != nil || id == "" {
		return tenantCursor{}, fmt.Errorf("malformed cursor %q", c)
	}
	return tenantCursor{at: time.UnixMicro(n), id: id}, nil
}
