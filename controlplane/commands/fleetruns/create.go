package fleetruns

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/better-compute/commands/controlplane/commands/batches"
	"github.com/better-compute/commands/controlplane/commands/events"
	"github.com/better-compute/commands/controlplane/fleet/labels"
	"github.com/better-compute/commands/controlplane/fleet/pools"
	"github.com/better-compute/commands/controlplane/internal/errcode"
	"github.com/better-compute/commands/controlplane/internal/ids"
	"github.com/better-compute/commands/internal/names"
	"github.com/better-compute/commands/internal/trust"
	"github.com/better-compute/commands/sdk/kind"
)

// CreateParams describe a run to create. The API checks the kind against
// its allowlist and the caller's identity before it calls Create.
type CreateParams struct {
	TenantID string
	Kind     string
	// Payload is the kind's payload, already checked against its schema.
	Payload                   json.RawMessage
	Targets                   Targets
	MaxConcurrency, MaxErrors string
	NotAfterSeconds           int
	IdempotencyKey, Reason    string
	Requester, RequestedVia   string
	// ApprovalDeadline bounds a destructive run's batch (0: the maximum).
	ApprovalDeadline time.Duration
	// Authorize answers whether the caller may run the kind on a node:
	// "" when it may, else the refusal's words.
	Authorize func(nodeID string) string
}

// Defaults of a run's limits.
const (
	DefaultMaxConcurrency = "10%"
	DefaultMaxErrors      = "0"
)

// candidate is a node the targets selected.
type candidate struct {
	id, role, pool string
	allowedKinds   []string
}

// Create stores a run and returns it (or the run already created under the
// same idempotency key by the same requester, with duplicate set). Every
// node the targets select gets a target row: waiting, or refused with the
// reason a check gave. A destructive kind's run gets a batch whose leaves
// name every target it may start. The run's commands are queued by the
// advancer, which the run's event wakes.
func (s *Service) Create(ctx context.Context, p CreateParams) (Run, bool, error) {
	if p.MaxConcurrency == "" {
		p.MaxConcurrency = DefaultMaxConcurrency
	}
	if p.MaxErrors == "" {
		p.MaxErrors = DefaultMaxErrors
	}
	// The limits' syntax is checked before anything is read: a bad one is
	// refused whatever the targets.
	if _, err := Limit("maxConcurrency", p.MaxConcurrency, 1, true); err != nil {
		return Run{}, false, err
	}
	if _, err := Limit("maxErrors", p.MaxErrors, 1, false); err != nil {
		return Run{}, false, err
	}
	m, ok := s.q.Registry().Get(p.Kind)
	if !ok {
		return Run{}, false, &errcode.Error{Code: errcode.Unsupported, Reason: "unknown-kind", Message: fmt.Sprintf("kind %q is not registered", p.Kind), Details: map[string]string{"kind": p.Kind}}
	}
	if err := checkTargets(p.Targets); err != nil {
		return Run{}, false, err
	}
	if m.Flags.Destructive && strings.TrimSpace(p.Reason) == "" {
		return Run{}, false, invalid("reason", "a run of %s (destructive) needs a reason: its batch's approvers read it", p.Kind)
	}
	var (
		run Run
		dup bool
	)
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if p.IdempotencyKey != "" {
			id, err := s.runIDByKey(ctx, tx, p.TenantID, p.Requester, p.IdempotencyKey)
			if err != nil {
				return err
			}
			if id != "" {
				dup = true
				run.ID = id
				return nil
			}
		}
		var err error
		run, err = s.create(ctx, tx, p, m)
		return err
	})
	if err != nil {
		return Run{}, false, err
	}
	if dup {
		r, err := s.Get(ctx, p.TenantID, run.ID)
		if err != nil {
			return Run{}, false, err
		}
		if r.Kind != p.Kind {
			return Run{}, false, &errcode.Error{Code: errcode.Conflict, Reason: "idempotency-key-reused",
				Message: fmt.Sprintf("idempotency key already names run %s of kind %s, not %s", r.ID, r.Kind, p.Kind), Details: map[string]string{"runId": r.ID, "kind": r.Kind}}
		}
		return r, true, nil
	}
	s.Wake()
	r, err := s.Get(ctx, p.TenantID, run.ID)
	return r, false, err
}

func (s *Service) runIDByKey(ctx context.Context, tx pgx.Tx, tenantID, requester, key string) (string, error) {
	var id string
	err := tx.QueryRow(ctx, `SELECT id FROM fleet_runs WHERE tenant_id = $1 AND requester = $2 AND idempotency_key = $3`, tenantID, requester, key).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("reading the run of idempotency key %q: %w", key, err)
	}
	return id, nil
}

func checkTargets(t Targets) error {
	if !t.All && len(t.NodeIDs) == 0 && t.Pool == "" && t.Selector == "" && len(t.Conditions) == 0 {
		return invalid("targets", "targets select no node: give nodeIds, a pool, a selector, conditions, or all")
	}
	if t.All && (len(t.NodeIDs) > 0 || t.Pool != "" || t.Selector != "" || len(t.Conditions) > 0) {
		return invalid("targets", "targets.all selects every node and takes no other criterion")
	}
	if len(t.NodeIDs) > MaxTargets {
		return invalid("targets", "%d node ids given; a run has at most %d targets", len(t.NodeIDs), MaxTargets)
	}
	for i, id := range t.NodeIDs {
		if err := names.ID("targets.nodeIds["+strconv.Itoa(i)+"]", id); err != nil {
			return invalid("targets", "%v", err)
		}
	}
	if t.Pool != "" {
		if err := pools.CheckName(t.Pool); err != nil {
			return err
		}
	}
	if _, err := labels.Parse(t.Selector); err != nil {
		return err
	}
	for i, c := range t.Conditions {
		if err := names.ID("targets.conditions["+strconv.Itoa(i)+"]", c); err != nil {
			return invalid("targets", "%v: a condition type such as RowRemapPending", err)
		}
	}
	return nil
}

// resolve reads the nodes the targets select, in the order given (node ids
// as listed, else by id), and the listed ids that select no node.
func (s *Service) resolve(ctx context.Context, tx pgx.Tx, tenantID string, t Targets) ([]candidate, []Target, error) {
	if t.Pool != "" {
		ok, err := pools.Exists(ctx, tx, tenantID, t.Pool)
		if err != nil {
			return nil, nil, err
		}
		if !ok {
			return nil, nil, &errcode.Error{Code: errcode.InvalidInput, Reason: "unknown-pool",
				Message: fmt.Sprintf("pool %s of tenant %s has no nodes and no budget: check the name (better-compute pools list)", t.Pool, tenantID),
				Details: map[string]string{"field": "targets.pool", "pool": t.Pool}}
		}
	}
	sel, _ := labels.Parse(t.Selector)
	if err := labels.CheckKnown(ctx, tx, tenantID, sel); err != nil {
		return nil, nil, err
	}
	args := []any{tenantID, t.Pool, t.NodeIDs, t.Conditions}
	cond, sargs := sel.SQL("n.labels", len(args)+1)
	args = append(args, sargs...)
	rows, err := tx.Query(ctx, `SELECT n.id, n.role, n.allowed_kinds, n.pool FROM nodes n
		WHERE n.tenant_id = $1 AND n.deleted_at IS NULL
		  AND ($2 = '' OR n.pool = $2)
		  AND (coalesce(cardinality($3::text[]), 0) = 0 OR n.id = ANY ($3::text[]))
		  AND (SELECT bool_and(coalesce(n.conditions, '[]'::jsonb) @> jsonb_build_array(jsonb_build_object('type', c, 'status', 'True')))
		       FROM unnest($4::text[]) AS c) IS NOT FALSE
		  AND `+cond+`
		ORDER BY n.id LIMIT `+strconv.Itoa(MaxTargets+1), args...)
	if err != nil {
		return nil, nil, fmt.Errorf("resolving the targets: %w", err)
	}
	var cs []candidate
	for rows.Next() {
		var c candidate
		if err := rows.Scan(&c.id, &c.role, &c.allowedKinds, &c.pool); err != nil {
			rows.Close()
			return nil, nil, fmt.Errorf("resolving the targets: %w", err)
		}
		cs = append(cs, c)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, nil, fmt.Errorf("resolving the targets: %w", err)
	}
	if len(cs) > MaxTargets {
		return nil, nil, invalid("targets", "targets select more than %d nodes: narrow them (a pool, a selector), or run several", MaxTargets)
	}
	if len(t.NodeIDs) == 0 {
		return cs, nil, nil
	}
	byID := map[string]candidate{}
	for _, c := range cs {
		byID[c.id] = c
	}
	var ordered []candidate
	var missing []Target
	seen := map[string]bool{}
	for _, id := range t.NodeIDs {
		if seen[id] {
			continue
		}
		seen[id] = true
		if c, ok := byID[id]; ok {
			ordered = append(ordered, c)
			continue
		}
		missing = append(missing, Target{NodeID: id, State: TargetRefused, Reason: ReasonNotFound, Message: "node " + id + " not found in the tenant, or it does not match the run's other criteria"})
	}
	return ordered, missing, nil
}

// check says why a candidate may not run the kind ("" when it may).
func check(c candidate, m kind.Manifest, authorize func(string) string) (reason, message string) {
	if authorize != nil {
		if why := authorize(c.id); why != "" {
			return ReasonPermission, why
		}
	}
	if c.allowedKinds != nil && !slices.Contains(c.allowedKinds, m.Kind) {
		return ReasonRestricted, fmt.Sprintf("node %s runs a restricted identity that does not accept %s", c.id, m.Kind)
	}
	if !slices.Contains(m.Roles, c.role) {
		return ReasonRole, fmt.Sprintf("node %s runs role %s; %s runs on %s", c.id, c.role, m.Kind, strings.Join(m.Roles, ", "))
	}
	return "", ""
}

func (s *Service) create(ctx context.Context, tx pgx.Tx, p CreateParams, m kind.Manifest) (Run, error) {
	cs, refused, err := s.resolve(ctx, tx, p.TenantID, p.Targets)
	if err != nil {
		return Run{}, err
	}
	if len(cs) == 0 && len(refused) == 0 {
		return Run{}, invalid("targets", "the targets select no node of tenant %s (%s)", p.TenantID, describe(p.Targets))
	}
	var ok []candidate
	for _, c := range cs {
		if reason, msg := check(c, m, p.Authorize); reason != "" {
			refused = append(refused, Target{NodeID: c.id, Pool: c.pool, State: TargetRefused, Reason: reason, Message: msg})
			continue
		}
		ok = append(ok, c)
	}
	if len(ok) == 0 {
		first := refused[0]
		return Run{}, &errcode.Error{Code: errcode.PermissionDenied, Reason: "no-runnable-target",
			Message: fmt.Sprintf("none of the %d target(s) may run %s: %s: %s (%s)", len(refused), p.Kind, first.NodeID, first.Message, first.Reason),
			Details: map[string]string{"kind": p.Kind, "nodeId": first.NodeID, "reason": first.Reason}}
	}
	conc, err := Limit("maxConcurrency", p.MaxConcurrency, len(ok), true)
	if err != nil {
		return Run{}, err
	}
	errs, err := Limit("maxErrors", p.MaxErrors, len(ok), false)
	if err != nil {
		return Run{}, err
	}
	run := Run{ID: ids.New(ids.Run), TenantID: p.TenantID, Kind: p.Kind, Payload: p.Payload, Targets: p.Targets,
		MaxConcurrency: p.MaxConcurrency, MaxErrors: p.MaxErrors, ConcurrencyLimit: conc, ErrorLimit: errs,
		NotAfterSeconds: p.NotAfterSeconds, Reason: p.Reason, Requester: p.Requester, RequestedVia: p.RequestedVia,
		IdempotencyKey: p.IdempotencyKey, Disruptive: m.Flags.Destructive, State: StateRunning}
	if len(run.Payload) == 0 {
		run.Payload = json.RawMessage("{}")
	}
	if m.Flags.Destructive {
		// Each leaf binds the run's payload: the approval covers exactly
		// what the run sends (which GPU a gpu.reset resets), and no other
		// command can use a leaf with another payload.
		digest := hex.EncodeToString(trust.PayloadDigest(run.Payload))
		scope := make([]batches.Leaf, len(ok))
		for i, c := range ok {
			scope[i] = batches.Leaf{Subject: c.id, Kind: p.Kind, PayloadSHA256: digest}
		}
		deadline := p.ApprovalDeadline
		if deadline == 0 {
			deadline = batches.MaxDeadline
		}
		b, _, err := batches.Create(ctx, tx, s.quorum(), batches.CreateParams{TenantID: p.TenantID, Requester: p.Requester,
			Reason: fmt.Sprintf("fleet run %s: %s", run.ID, p.Reason), Scope: scope, Deadline: deadline}, s.now())
		if err != nil {
			return Run{}, fmt.Errorf("creating the run's batch: %w", err)
		}
		run.BatchID = b.ID
	}
	targets, err := json.Marshal(p.Targets)
	if err != nil {
		return Run{}, fmt.Errorf("encoding the targets: %w", err)
	}
	tag, err := tx.Exec(ctx, `INSERT INTO fleet_runs (id, tenant_id, kind, payload, targets, max_concurrency, max_errors,
		concurrency_limit, error_limit, not_after_seconds, reason, requester, requested_via, idempotency_key, batch_id, disruptive)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16)
		ON CONFLICT (tenant_id, requester, idempotency_key) WHERE idempotency_key <> '' DO NOTHING`,
		run.ID, run.TenantID, run.Kind, run.Payload, targets, run.MaxConcurrency, run.MaxErrors, run.ConcurrencyLimit, run.ErrorLimit,
		run.NotAfterSeconds, run.Reason, run.Requester, run.RequestedVia, run.IdempotencyKey, run.BatchID, run.Disruptive)
	if err != nil {
		return Run{}, fmt.Errorf("storing run %s: %w", run.ID, err)
	}
	if tag.RowsAffected() == 0 {
		// Another call with the same key committed first.
		return Run{}, &errcode.Error{Code: errcode.Unavailable, Reason: "concurrent-create",
			Message: "a run with the same idempotency key was created at the same time: retry to get it", Details: map[string]string{"idempotencyKey": p.IdempotencyKey}}
	}
	n := len(ok) + len(refused)
	nodes, poolsCol, states, reasons, msgs := make([]string, 0, n), make([]string, 0, n), make([]string, 0, n), make([]string, 0, n), make([]string, 0, n)
	for _, c := range ok {
		nodes, poolsCol, states, reasons, msgs = append(nodes, c.id), append(poolsCol, c.pool), append(states, TargetWaiting), append(reasons, ""), append(msgs, "")
	}
	for _, r := range refused {
		nodes, poolsCol, states, reasons, msgs = append(nodes, r.NodeID), append(poolsCol, r.Pool), append(states, TargetRefused), append(reasons, r.Reason), append(msgs, r.Message)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO fleet_run_targets (run_id, ordinal, node_id, pool, state, reason, message)
		SELECT $1, ord - 1, node, pool, state, reason, message
		FROM unnest($2::text[], $3::text[], $4::text[], $5::text[], $6::text[]) WITH ORDINALITY AS t(node, pool, state, reason, message, ord)`,
		run.ID, nodes, poolsCol, states, reasons, msgs); err != nil {
		return Run{}, fmt.Errorf("storing the targets of run %s: %w", run.ID, err)
	}
	if err := events.Write(ctx, tx, run.TenantID, TopicCreated, map[string]any{"runId": run.ID, "kind": run.Kind,
		"targets": len(ok), "refused": len(refused), "concurrencyLimit": conc, "errorLimit": errs, "batchId": run.BatchID,
		"requester": run.Requester, "requestedVia": run.RequestedVia}); err != nil {
		return Run{}, err
	}
	return run, nil
}

func describe(t Targets) string {
	var parts []string
	if t.All {
		parts = append(parts, "all nodes")
	}
	if len(t.NodeIDs) > 0 {
		parts = append(parts, fmt.Sprintf("%d node id(s)", len(t.NodeIDs)))
	}
	if t.Pool != "" {
		parts = append(parts, "pool "+t.Pool)
	}
	if t.Selector != "" {
		parts = append(parts, "selector "+t.Selector)
	}
	if len(t.Conditions) > 0 {
		parts = append(parts, "conditions "+strings.Join(t.Conditions, ","))
	}
	return strings.Join(parts, ", ")
}
