package nodes

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/better-compute/commands/controlplane/fleet/nodehealth"
	"github.com/better-compute/commands/controlplane/internal/store"
)

// Summary counts a tenant's live nodes for the fleet overview.
type Summary struct {
	// Nodes, Connected and Unhealthy count the nodes, those whose session
	// is open and those nodehealth calls unhealthy.
	Nodes, Connected, Unhealthy int64
	// Pools are the same counts by pool, by name.
	Pools []PoolCount
	// ByCondition counts the nodes reporting each problem condition
	// (nodehealth.Problem), ByFailedCheck those whose latest diag.nvml
	// failed each check; both most first, then by name.
	ByCondition   []NameCount
	ByFailedCheck []NameCount
}

// PoolCount is one pool's counts.
type PoolCount struct {
	Pool                        string
	Nodes, Connected, Unhealthy int64
}

// NameCount is how many nodes a name (a condition, a check) counts.
type NameCount struct {
	Name  string
	Nodes int64
}

// visibleSQL selects the tenant's live nodes the caller reads ($1 tenant,
// $2 the LIKE patterns of its grants or NULL for all, $3 StaleAfter in
// seconds), with their connection and health.
var visibleSQL = `SELECT id, pool, conditions, failed_checks, ` + connectedSQL + ` AS connected,
	` + nodehealth.UnhealthySQL("") + ` AS unhealthy
	FROM nodes WHERE tenant_id = $1 AND deleted_at IS NULL
	  AND ($2::text[] IS NULL OR ('compute-node/' || id) LIKE ANY ($2::text[]))`

// Summarise counts the tenant's live nodes whose resource name
// (compute-node/{id}) matches one of the LIKE patterns, or all of them
// when patterns is nil. Its statements are several: run it in one
// repeatable-read transaction for counts of one snapshot.
func Summarise(ctx context.Context, db store.DBTX, tenantID string, patterns []string) (Summary, error) {
	var out Summary
	args := []any{tenantID, patterns, StaleAfter.Seconds()}
	if err := db.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE connected), count(*) FILTER (WHERE unhealthy)
		FROM (`+visibleSQL+`) v`, args...).Scan(&out.Nodes, &out.Connected, &out.Unhealthy); err != nil {
		return Summary{}, fmt.Errorf("counting nodes: %w", err)
	}
	rows, err := db.Query(ctx, `SELECT pool, count(*), count(*) FILTER (WHERE connected), count(*) FILTER (WHERE unhealthy)
		FROM (`+visibleSQL+`) v GROUP BY pool ORDER BY pool`, args...)
	if err != nil {
		return Summary{}, fmt.Errorf("counting nodes by pool: %w", err)
	}
	out.Pools, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (PoolCount, error) {
		var p PoolCount
		return p, r.Scan(&p.Pool, &p.Nodes, &p.Connected, &p.Unhealthy)
	})
	if err != nil {
		return Summary{}, fmt.Errorf("counting nodes by pool: %w", err)
	}
	count := func(what, sql string) ([]NameCount, error) {
		rows, err := db.Query(ctx, sql, args...)
		if err != nil {
			return nil, fmt.Errorf("counting nodes by %s: %w", what, err)
		}
		cs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (NameCount, error) {
			var c NameCount
			return c, r.Scan(&c.Name, &c.Nodes)
		})
		if err != nil {
			return nil, fmt.Errorf("counting nodes by %s: %w", what, err)
		}
		return cs, nil
	}
	if out.ByCondition, err = count("condition", `SELECT c->>'type', count(DISTINCT v.id) FROM (`+visibleSQL+`) v,
		jsonb_array_elements(CASE WHEN jsonb_typeof(v.conditions) = 'array' THEN v.conditions ELSE '[]'::jsonb END) c
		WHERE c->>'type' IS NOT NULL AND `+nodehealth.ProblemSQL+` GROUP BY 1 ORDER BY 2 DESC, 1`); err != nil {
		return Summary{}, err
	}
	if out.ByFailedCheck, err = count("failed check", `SELECT ch, count(*) FROM (`+visibleSQL+`) v, unnest(v.failed_checks) ch
		GROUP BY 1 ORDER BY 2 DESC, 1`); err != nil {
		return Summary{}, err
	}
	return out, nil
}
