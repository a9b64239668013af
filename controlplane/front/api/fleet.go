package api

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/better-compute/commands/controlplane/commands/queue"
	"github.com/better-compute/commands/controlplane/fleet/nodehealth"
	"github.com/better-compute/commands/controlplane/internal/apierr"
	"github.com/better-compute/commands/controlplane/internal/errcode"
	"github.com/better-compute/commands/controlplane/trust/auth"
	apiv1 "github.com/better-compute/commands/proto/bc/api/v1"
)

// fleetServer serves fleet.summary: the console's overview.
type fleetServer struct {
	apiv1.UnimplementedFleetServer
	s *Server
}

// visibleNodesSQL selects the tenant's live nodes the caller reads ($1
// tenant, $2 the LIKE patterns of its grants or NULL for all, $3
// sessionStaleAfter in seconds), with their connection and health.
var visibleNodesSQL = `SELECT id, pool, conditions, failed_checks, ` + connectedSQL + ` AS connected,
	` + nodehealth.UnhealthySQL("") + ` AS unhealthy
	FROM nodes WHERE tenant_id = $1 AND deleted_at IS NULL
	  AND ($2::text[] IS NULL OR ('compute-node/' || id) LIKE ANY ($2::text[]))`

// Summary counts what the caller may read of the tenant's fleet, in one
// snapshot (a repeatable-read transaction): nodes by connection, health,
// pool, condition and failed check; the commands that failed in the last
// hour; open fleet runs and batches awaiting approval; and whether
// commands are signed.
func (f *fleetServer) Summary(ctx context.Context, req *apiv1.FleetSummaryRequest) (*apiv1.FleetSummary, error) {
	s := f.s
	id, err := identity(ctx)
	if err != nil {
		return nil, err
	}
	if err := validID("tenantId", req.GetTenantId()); err != nil {
		return nil, err
	}
	tenantID := req.GetTenantId()
	if !id.SeesTenant(tenantID) {
		return nil, apierr.New(errcode.NotFound, "tenant "+tenantID+" not found", map[string]string{"tenantId": tenantID})
	}
	now := s.now()
	out := &apiv1.FleetSummary{AsOf: timestamppb.New(now), CommandSigning: s.queue.Signer() != nil,
		ApprovalThreshold: int32(s.quorumNow().Needed())}
	var patterns []string // nil: every node
	if ps := id.ResourcePatterns(auth.PermNodesRead, "compute-node/"); ps != nil {
		patterns = make([]string, len(ps))
		for i, p := range ps {
			patterns[i] = queue.GlobToLike(p)
		}
	}
	err = pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		if patterns != nil && len(patterns) == 0 {
			return nil // no grant reads any node
		}
		return summarise(ctx, tx, out, tenantID, patterns)
	})
	if err != nil {
		return nil, s.fail(ctx, "fleet.summary", err)
	}
	err = pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		if patterns == nil || len(patterns) > 0 {
			if err := tx.QueryRow(ctx, `SELECT count(*) FROM commands c WHERE c.tenant_id = $1 AND c.state = ANY ($2::text[]) AND c.settled_at > $3
				AND ($4::text[] IS NULL OR ('compute-node/' || c.node_id) LIKE ANY ($4::text[]))`,
				tenantID, []string{string(queue.Failed), string(queue.Rejected), string(queue.Expired)}, now.Add(-time.Hour), patterns).Scan(&out.FailedLastHour); err != nil {
				return fmt.Errorf("counting the last hour's failures: %w", err)
			}
		}
		// Runs: all of the tenant's with compute:runs:read, else the
		// caller's own (what fleetRuns.list shows it).
		allRuns := id.Allowed(auth.PermRunsRead, auth.TenantResource(tenantID))
		if err := tx.QueryRow(ctx, `SELECT count(*) FROM fleet_runs WHERE tenant_id = $1 AND finished_at IS NULL AND ($2 OR requester = $3)`,
			tenantID, allRuns, id.Name).Scan(&out.RunsInProgress); err != nil {
			return fmt.Errorf("counting open fleet runs: %w", err)
		}
		if id.Allowed(auth.PermBatchesRead, auth.TenantResource(tenantID)) {
			if err := tx.QueryRow(ctx, `SELECT count(*) FROM command_batches WHERE tenant_id = $1 AND state = 'awaiting-approval' AND deadline > $2`,
				tenantID, now).Scan(&out.BatchesAwaitingApproval); err != nil {
				return fmt.Errorf("counting batches awaiting approval: %w", err)
			}
		}
		return nil
	})
	if err != nil {
		return nil, s.fail(ctx, "fleet.summary", err)
	}
	s.outage.OK()
	return out, nil
}

// summarise fills the node counts of out from one snapshot.
func summarise(ctx context.Context, tx pgx.Tx, out *apiv1.FleetSummary, tenantID string, patterns []string) error {
	args := []any{tenantID, patterns, sessionStaleAfter.Seconds()}
	if err := tx.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE connected), count(*) FILTER (WHERE unhealthy)
		FROM (`+visibleNodesSQL+`) v`, args...).Scan(&out.Nodes, &out.Connected, &out.Unhealthy); err != nil {
		return fmt.Errorf("counting nodes: %w", err)
	}
	out.Healthy = out.Nodes - out.Unhealthy
	rows, err := tx.Query(ctx, `SELECT pool, count(*), count(*) FILTER (WHERE connected), count(*) FILTER (WHERE unhealthy)
		FROM (`+visibleNodesSQL+`) v GROUP BY pool ORDER BY pool`, args...)
	if err != nil {
		return fmt.Errorf("counting nodes by pool: %w", err)
	}
	out.Pools, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (*apiv1.PoolCount, error) {
		p := &apiv1.PoolCount{}
		return p, r.Scan(&p.Pool, &p.Nodes, &p.Connected, &p.Unhealthy)
	})
	if err != nil {
		return fmt.Errorf("counting nodes by pool: %w", err)
	}
	count := func(what, sql string) ([]*apiv1.NodeCount, error) {
		rows, err := tx.Query(ctx, sql, args...)
		if err != nil {
			return nil, fmt.Errorf("counting nodes by %s: %w", what, err)
		}
		cs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (*apiv1.NodeCount, error) {
			c := &apiv1.NodeCount{}
			return c, r.Scan(&c.Name, &c.Nodes)
		})
		if err != nil {
			return nil, fmt.Errorf("counting nodes by %s: %w", what, err)
		}
		return cs, nil
	}
	if out.ByCondition, err = count("condition", `SELECT c->>'type', count(DISTINCT v.id) FROM (`+visibleNodesSQL+`) v,
		jsonb_array_elements(CASE WHEN jsonb_typeof(v.conditions) = 'array' THEN v.conditions ELSE '[]'::jsonb END) c
		WHERE c->>'type' IS NOT NULL AND `+nodehealth.ProblemSQL+` GROUP BY 1 ORDER BY 2 DESC, 1`); err != nil {
		return err
	}
	out.ByFailedCheck, err = count("failed check", `SELECT ch, count(*) FROM (`+visibleNodesSQL+`) v, unnest(v.failed_checks) ch
		GROUP BY 1 ORDER BY 2 DESC, 1`)
	return err
}
