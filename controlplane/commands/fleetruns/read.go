package fleetruns

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/better-compute/commands/controlplane/internal/errcode"
	"github.com/better-compute/commands/controlplane/internal/store"
)

// NotFound is the answer for a run the tenant does not have.
func NotFound(runID string) error {
	return &errcode.Error{Code: errcode.NotFound, Reason: "run-not-found", Message: "fleet run " + runID + " not found", Details: map[string]string{"runId": runID}}
}

const runColumns = `id, tenant_id, kind, payload, targets, max_concurrency, max_errors, concurrency_limit, error_limit,
	not_after_seconds, reason, requester, requested_via, idempotency_key, batch_id, disruptive, state, state_reason, state_message,
	waiting_reason, waiting_message, created_at, updated_at, started_at, finished_at, cancel_requested_at, progress`

func scanRun(row pgx.Row) (Run, error) {
	var (
		r       Run
		targets []byte
	)
	err := row.Scan(&r.ID, &r.TenantID, &r.Kind, &r.Payload, &targets, &r.MaxConcurrency, &r.MaxErrors, &r.ConcurrencyLimit, &r.ErrorLimit,
		&r.NotAfterSeconds, &r.Reason, &r.Requester, &r.RequestedVia, &r.IdempotencyKey, &r.BatchID, &r.Disruptive, &r.State, &r.StateReason, &r.StateMessage,
		&r.WaitingReason, &r.WaitingMessage, &r.CreatedAt, &r.UpdatedAt, &r.StartedAt, &r.FinishedAt, &r.CancelRequest, &r.published)
	if err != nil {
		return Run{}, err
	}
	if err := json.Unmarshal(targets, &r.Targets); err != nil {
		return Run{}, fmt.Errorf("decoding the targets of run %s: %w", r.ID, err)
	}
	return r, nil
}

// Get returns a run of the tenant with its counts and refused targets.
func (s *Service) Get(ctx context.Context, tenantID, runID string) (Run, error) {
	r, err := scanRun(s.pool.QueryRow(ctx, `SELECT `+runColumns+` FROM fleet_runs WHERE id = $1 AND tenant_id = $2`, runID, tenantID))
	if errors.Is(err, pgx.ErrNoRows) {
		return Run{}, NotFound(runID)
	}
	if err != nil {
		return Run{}, fmt.Errorf("reading run %s: %w", runID, err)
	}
	if r.Counts, err = counts(ctx, s.pool, runID); err != nil {
		return Run{}, err
	}
	if r.Counts.ByState[TargetRefused] > 0 {
		r.Refused, _, err = s.targets(ctx, s.pool, runID, TargetRefused, MaxRefusedShown, -1)
		if err != nil {
			return Run{}, err
		}
	}
	return r, nil
}

// counts counts a run's targets by state, and by reason those that ended
// other than succeeded.
func counts(ctx context.Context, db store.DBTX, runID string) (Counts, error) {
	c := Counts{ByState: map[string]int{}, ByReason: map[string]int{}}
	rows, err := db.Query(ctx, `SELECT state, CASE WHEN state IN ('waiting', 'started', 'succeeded') THEN '' ELSE reason END, count(*)
		FROM fleet_run_targets WHERE run_id = $1 GROUP BY 1, 2`, runID)
	if err != nil {
		return Counts{}, fmt.Errorf("counting the targets of run %s: %w", runID, err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			state, reason string
			n             int
		)
		if err := rows.Scan(&state, &reason, &n); err != nil {
			return Counts{}, fmt.Errorf("counting the targets of run %s: %w", runID, err)
		}
		c.Targets += n
		c.ByState[state] += n
		if reason != "" {
			c.ByReason[reason] += n
		}
	}
	return c, rows.Err()
}

// List returns a page of the tenant's runs, newest first; state "active"
// keeps the runs not yet ended, and requester, when set, the runs that
// identity created (what a caller without compute:runs:read may list).
func (s *Service) List(ctx context.Context, tenantID, state, requester string, limit int, cursor string) ([]Run, string, error) {
	switch state {
	case "", "active", StateRunning, StatePaused, StateStopping, StateCancelling, StateSucceeded, StateFailed, StateCancelled:
	default:
		return nil, "", invalid("state", "state %q is not a run state (running, paused, stopping, cancelling, succeeded, failed, cancelled, or active)", state)
	}
	limit = pageSize(limit, 50, 200)
	at, id, err := decodeRunCursor(cursor)
	if err != nil {
		return nil, "", invalid("cursor", "%v: pass nextCursor from the previous page", err)
	}
	rows, err := s.pool.Query(ctx, `SELECT `+runColumns+` FROM fleet_runs
		WHERE tenant_id = $1 AND ($2 = '' OR ($2 = 'active' AND finished_at IS NULL) OR state = $2)
		  AND ($3 = '' OR (created_at, id) < ($4, $3)) AND ($6 = '' OR requester = $6)
		ORDER BY created_at DESC, id DESC LIMIT $5`, tenantID, state, id, at, limit+1, requester)
	if err != nil {
		return nil, "", fmt.Errorf("listing runs: %w", err)
	}
	var out []Run
	for rows.Next() {
		r, err := scanRun(rows)
		if err != nil {
			rows.Close()
			return nil, "", fmt.Errorf("listing runs: %w", err)
		}
		out = append(out, r)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, "", fmt.Errorf("listing runs: %w", err)
	}
	next := ""
	if len(out) > limit {
		out = out[:limit]
		last := out[limit-1]
		next = encodeRunCursor(last.CreatedAt, last.ID)
	}
	for i := range out {
		if out[i].Counts, err = counts(ctx, s.pool, out[i].ID); err != nil {
			return nil, "", err
		}
	}
	return out, next, nil
}

// CountOpen counts the tenant's runs not yet finished: every requester's
// with all, else only those requester created (what List shows a caller
// without compute:runs:read).
func CountOpen(ctx context.Context, db store.DBTX, tenantID string, all bool, requester string) (int64, error) {
	var n int64
	if err := db.QueryRow(ctx, `SELECT count(*) FROM fleet_runs WHERE tenant_id = $1 AND finished_at IS NULL AND ($2 OR requester = $3)`,
		tenantID, all, requester).Scan(&n); err != nil {
		return 0, fmt.Errorf("counting open fleet runs: %w", err)
	}
	return n, nil
}

// Targets returns a page of a run's targets in order; state filters by a
// target state, or "failures" for failed, rejected and expired.
func (s *Service) Targets(ctx context.Context, tenantID, runID, state string, limit int, cursor string) ([]Target, string, error) {
	if state != "" && state != "failures" && !validTargetState(state) {
		return nil, "", invalid("state", "state %q is not a target state (%s, or failures)", state, strings.Join(TargetStates, ", "))
	}
	var ok bool
	if err := s.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM fleet_runs WHERE id = $1 AND tenant_id = $2)`, runID, tenantID).Scan(&ok); err != nil {
		return nil, "", fmt.Errorf("reading run %s: %w", runID, err)
	}
	if !ok {
		return nil, "", NotFound(runID)
	}
	after := -1
	if cursor != "" {
		b, err := base64.RawURLEncoding.DecodeString(cursor)
		n, err2 := strconv.Atoi(strings.TrimPrefix(string(b), "ord:"))
		if err != nil || err2 != nil || !strings.HasPrefix(string(b), "ord:") || n < 0 {
			return nil, "", invalid("cursor", "malformed cursor %q: pass nextCursor from the previous page", cursor)
		}
		after = n
	}
	limit = pageSize(limit, 200, 1000)
	ts, next, err := s.targets(ctx, s.pool, runID, state, limit, after)
	return ts, next, err
}

func (s *Service) targets(ctx context.Context, db store.DBTX, runID, state string, limit, after int) ([]Target, string, error) {
	states := []string{state}
	switch state {
	case "":
		states = TargetStates
	case "failures":
		states = []string{TargetFailed, TargetRejected, TargetExpired}
	}
	rows, err := db.Query(ctx, `SELECT t.run_id, t.ordinal, t.node_id, t.pool, t.state, coalesce(t.command_id, ''), coalesce(c.state, ''),
		CASE WHEN t.state = 'started' THEN coalesce(c.reason, '') ELSE t.reason END,
		CASE WHEN t.state = 'started' THEN coalesce(c.message, '') ELSE t.message END, t.started_at, t.settled_at
		FROM fleet_run_targets t LEFT JOIN commands c ON c.id = t.command_id
		WHERE t.run_id = $1 AND t.state = ANY ($2::text[]) AND t.ordinal > $3
		ORDER BY t.ordinal LIMIT $4`, runID, states, after, limit+1)
	if err != nil {
		return nil, "", fmt.Errorf("listing the targets of run %s: %w", runID, err)
	}
	defer rows.Close()
	var out []Target
	for rows.Next() {
		var t Target
		if err := rows.Scan(&t.RunID, &t.Ordinal, &t.NodeID, &t.Pool, &t.State, &t.CommandID, &t.CommandState, &t.Reason, &t.Message, &t.StartedAt, &t.SettledAt); err != nil {
			return nil, "", fmt.Errorf("listing the targets of run %s: %w", runID, err)
		}
		out = append(out, t)
	}
	if err := rows.Err(); err != nil {
		return nil, "", fmt.Errorf("listing the targets of run %s: %w", runID, err)
	}
	next := ""
	if len(out) > limit {
		out = out[:limit]
		next = base64.RawURLEncoding.EncodeToString([]byte("ord:" + strconv.Itoa(out[limit-1].Ordinal)))
	}
	return out, next, nil
}

func validTargetState(s string) bool {
	for _, v := range TargetStates {
		if v == s {
			return true
		}
	}
	return false
}

func pageSize(limit, def, most int) int {
	switch {
	case limit <= 0:
		return def
	case limit > most:
		return most
	}
	return limit
}

func encodeRunCursor(at time.Time, id string) string {
	return base64.RawURLEncoding.EncodeToString([]byte("run:" + strconv.FormatInt(at.UnixMicro(), 10) + ":" + id))
}

func decodeRunCursor(c string) (time.Time, string, error) {
	if c == "" {
		return time.Time{}, "", nil
	}
	b, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil {
		return time.Time{}, "", fmt.Errorf("malformed cursor %q", c)
	}
	rest, ok := strings.CutPrefix(string(b), "run:")
	us, id, ok2 := strings.Cut(rest, ":")
	n, err := strconv.ParseInt(us, 10, 64)
	if !ok || !ok2 || err != nil || id == "" {
		return time.Time{}, "", fmt.Errorf("malformed cursor %q", c)
	}
	return time.UnixMicro(n), id, nil
}
