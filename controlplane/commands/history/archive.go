package history

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/better-compute/commands/controlplane/commands/history/archive"
	"github.com/better-compute/commands/controlplane/internal/store"
)

// DefaultBatch is how many rows one DELETE removes: small enough that each
// statement holds its row locks for milliseconds (see the operator guide's
// measurements), large enough that the archive keeps up with a fleet.
const DefaultBatch = 500

// Policy says how long each tenant's history stays in the hot tables.
type Policy struct {
	// Days applies to every tenant without an override, and to the fleet's
	// rows (events of no tenant, River's jobs); 0 keeps them forever.
	Days int
	// Tenants overrides Days per tenant id; 0 keeps that tenant's forever.
	Tenants map[string]int
}

// For is tenant's retention in days; 0 keeps its history forever.
func (p Policy) For(tenant string) int {
	if d, ok := p.Tenants[tenant]; ok {
		return d
	}
	return p.Days
}

// Enabled reports whether any tenant's history is archived.
func (p Policy) Enabled() bool {
	if p.Days > 0 {
		return true
	}
	for _, d := range p.Tenants {
		if d > 0 {
			return true
		}
	}
	return false
}

// Options tune an Archiver.
type Options struct {
	// Batch bounds the rows of one DELETE (DefaultBatch).
	Batch int
	// Logger logs; null when nil.
	Logger hclog.Logger
	// Now is the clock (time.Now).
	Now func() time.Time
	// Duty is the share of wall time the archiver works (0.5): after each
	// delete batch and each hour's object it rests for as long again as the
	// work took times (1-Duty)/Duty, so that on a small database server the
	// archive leaves the hot path its CPU (BenchmarkHistory: enqueue p99
	// during the archive).
	Duty float64
	// Renew, when set, runs in each delete's transaction first; false or an
	// error stops the archiver, so an old leader deletes nothing (Runner
	// passes its lease's renewal).
	Renew func(ctx context.Context, tx store.DBTX) (bool, error)
}

// Archiver archives and deletes expired history.
type Archiver struct {
	pool   *pgxpool.Pool
	sink   archive.Sink
	policy Policy
	opts   Options
	logger hclog.Logger
	// crash, set by tests, is called at "object", "manifest" and "delete"
	// (after the first delete batch); an error stops the hour there as a
	// process killed at that point would.
	crash func(step string) error
}

// Stats counts what a pass did.
type Stats struct {
	// Hours is how many tenant hours were archived.
	Hours int
	// Commands, Events and Jobs count the rows archived and deleted.
	Commands, Events, Jobs int
	// Held counts commands past their retention that an open batch, fleet
	// run, remediation or rollout still references: kept, archived later.
	Held int
}

// Rows is the rows deleted.
func (s Stats) Rows() int { return s.Commands + s.Events + s.Jobs }

func (s *Stats) add(o Stats) {
	s.Hours += o.Hours
	s.Commands += o.Commands
	s.Events += o.Events
	s.Jobs += o.Jobs
	s.Held += o.Held
}

// NewArchiver returns an archiver writing to sink.
func NewArchiver(pool *pgxpool.Pool, sink archive.Sink, policy Policy, opts Options) *Archiver {
	if opts.Batch <= 0 {
		opts.Batch = DefaultBatch
	}
	if opts.Logger == nil {
		opts.Logger = hclog.NewNullLogger()
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Duty <= 0 || opts.Duty > 1 {
		opts.Duty = 0.5
	}
	return &Archiver{pool: pool, sink: sink, policy: policy, opts: opts, logger: opts.Logger.Named("history")}
}

// rest waits (since start) * (1-Duty)/Duty, or until ctx ends.
func (a *Archiver) rest(ctx context.Context, start time.Time) error {
	d := time.Duration(float64(time.Since(start)) * (1 - a.opts.Duty) / a.opts.Duty)
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// Cutoff is the end of the last whole hour older than days: rows settled
// before it are past their retention.
func Cutoff(now time.Time, days int) time.Time {
	return now.UTC().Add(-time.Duration(days) * 24 * time.Hour).Truncate(time.Hour)
}

// Pass archives every tenant's expired hours, oldest first, and the fleet's.
func (a *Archiver) Pass(ctx context.Context) (Stats, error) {
	rows, err := a.pool.Query(ctx, `SELECT id FROM tenants ORDER BY id`)
	if err != nil {
		return Stats{}, fmt.Errorf("listing tenants: %w", err)
	}
	tenants, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return Stats{}, fmt.Errorf("listing tenants: %w", err)
	}
	var total Stats
	for _, t := range append(tenants, "") {
		days := a.policy.For(t)
		if days <= 0 {
			continue
		}
		if err := archive.CheckTenant(t); err != nil {
			a.logger.Warn("not archiving a tenant", "error", err)
			continue
		}
		st, err := a.Tenant(ctx, t, Cutoff(a.opts.Now(), days))
		total.add(st)
		if err != nil {
			return total, err
		}
	}
	return total, nil
}

// hoursPerManifest is how many hours share one manifest write.
const hoursPerManifest = 24

// Tenant archives tenant's hours before cutoff, oldest first, a day of
// hours at a time.
func (a *Archiver) Tenant(ctx context.Context, tenant string, cutoff time.Time) (Stats, error) {
	var total Stats
	after := time.Time{}
	for {
		var group []time.Time
		for len(group) < hoursPerManifest {
			hour, ok, err := a.nextHour(ctx, tenant, after, cutoff)
			if err != nil {
				return total, err
			}
			if !ok {
				break
			}
			group = append(group, hour)
			after = hour.Add(time.Hour)
		}
		if len(group) == 0 {
			return total, nil
		}
		st, err := a.hours(ctx, tenant, group)
		total.add(st)
		if err != nil {
			return total, err
		}
	}
}

// nextHourSQL finds the oldest hour in [$2, $3) holding a settled command
// of tenant $1, one of its events or (for the fleet, $4) a finished River
// job. One probe of commands_tenant_state_settled per terminal state, so it
// costs the same with a year of history as with a day.
const nextHourSQL = `
SELECT date_trunc('hour', min(m), 'UTC') FROM (
  SELECT (SELECT min(c.settled_at) FROM commands c
    WHERE c.tenant_id = $1 AND c.state = s AND c.settled_at >= $2 AND c.settled_at < $3) AS m
  FROM unnest(ARRAY['succeeded', 'failed', 'rejected', 'expired', 'cancelled']) s
  UNION ALL
  SELECT min(o.created_at) FROM outbox o WHERE o.tenant_id = $1 AND o.created_at >= $2 AND o.created_at < $3
  UNION ALL
  SELECT min(j.finalized_at) FROM river_job j
    WHERE $4 AND j.state IN ('completed', 'cancelled', 'discarded') AND j.finalized_at >= $2 AND j.finalized_at < $3
) x`

func (a *Archiver) nextHour(ctx context.Context, tenant string, after, cutoff time.Time) (time.Time, bool, error) {
	var h *time.Time
	if err := a.pool.QueryRow(ctx, nextHourSQL, tenant, after, cutoff, tenant == "").Scan(&h); err != nil {
		return time.Time{}, false, fmt.Errorf("finding the next hour of %q: %w", tenant, err)
	}
	if h == nil {
		return time.Time{}, false, nil
	}
	return h.UTC(), true, nil
}

// keyOf is the identity of the record of type typ whose row's id is id:
// what a line parsed back (recordKey) and a row just read (readHour) are
// matched by.
func keyOf(typ, id string) string { return typ + ":" + id }

// recordKey is a line's identity: its type and its row's id.
func recordKey(line []byte) (string, string, error) {
	var rec struct {
		Type string `json:"type"`
		Row  struct {
			ID json.RawMessage `json:"id"`
		} `json:"row"`
	}
	if err := json.Unmarshal(line, &rec); err != nil {
		return "", "", fmt.Errorf("%w: a record: %w", archive.ErrIntegrity, err)
	}
	return rec.Type, keyOf(rec.Type, string(bytes.Trim(rec.Row.ID, `"`))), nil
}
