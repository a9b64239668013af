package history

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/better-compute/commands/controlplane/commands/bundles"
	"github.com/better-compute/commands/controlplane/commands/history/archive"
)

// heldSQL is true for a command that something still open references: a
// batch awaiting approval or approved and not past its deadline, a fleet
// run not finished, an active remediation, a rollout still upgrading its
// node. Those rows stay until it closes; their hour's object takes them
// then.
const heldSQL = `(
  (c.batch_id <> '' AND EXISTS (SELECT 1 FROM command_batches b
     WHERE b.id = c.batch_id AND b.state IN ('awaiting-approval', 'approved') AND b.deadline > now()))
  OR EXISTS (SELECT 1 FROM fleet_run_targets t JOIN fleet_runs r ON r.id = t.run_id
     WHERE t.command_id = c.id AND r.finished_at IS NULL)
  OR EXISTS (SELECT 1 FROM remediations m
     WHERE m.state IN ('waiting', 'running', 'verifying') AND (m.command_id = c.id OR m.verify_command_id = c.id))
  OR EXISTS (SELECT 1 FROM rollout_nodes n WHERE n.command_id = c.id AND n.state IN ('pending', 'upgrading')))`

// hourCommandsSQL selects tenant $1's commands settled in [$2, $3), every
// column, with whether something open holds them.
const hourCommandsSQL = `
SELECT c.id, jsonb_build_object('type', 'command', 'row', to_jsonb(c))::text, ` + heldSQL + `
FROM commands c
WHERE c.tenant_id = $1 AND c.state IN ('succeeded', 'failed', 'rejected', 'expired', 'cancelled')
  AND c.settled_at >= $2 AND c.settled_at < $3
ORDER BY c.id`

const hourEventsSQL = `
SELECT o.id::text, jsonb_build_object('type', 'event', 'row', to_jsonb(o))::text
FROM outbox o WHERE o.tenant_id = $1 AND o.created_at >= $2 AND o.created_at < $3
ORDER BY o.id`

const hourJobsSQL = `
SELECT j.id::text, jsonb_build_object('type', 'job', 'row', to_jsonb(j))::text
FROM river_job j WHERE j.state IN ('completed', 'cancelled', 'discarded') AND j.finalized_at >= $1 AND j.finalized_at < $2
ORDER BY j.id`

// hourRows are the rows of one tenant hour still in the database.
type hourRows struct {
	// hour is the hour the rows settled in.
	hour  time.Time
	lines [][]byte
	// keys[i] is lines[i]'s record key (keyOf its type and id), known
	// from the row's id: parsing each line back for it cost the archive
	// more than compressing it.
	keys                  []string
	commands, events, job []string
	held                  int
}

func (a *Archiver) readHour(ctx context.Context, tenant string, hour time.Time) (hourRows, error) {
	var h hourRows
	end := hour.Add(time.Hour)
	rows, err := a.pool.Query(ctx, hourCommandsSQL, tenant, hour, end)
	if err != nil {
		return h, fmt.Errorf("reading commands: %w", err)
	}
	var id, line string
	var held bool
	_, err = pgx.ForEachRow(rows, []any{&id, &line, &held}, func() error {
		if held {
			h.held++
			return nil
		}
		h.commands = append(h.commands, id)
		h.lines = append(h.lines, []byte(line))
		h.keys = append(h.keys, keyOf(archive.TypeCommand, id))
		return nil
	})
	if err != nil {
		return h, fmt.Errorf("reading commands: %w", err)
	}
	read := func(sql, typ string, ids *[]string, args ...any) error {
		rows, err := a.pool.Query(ctx, sql, args...)
		if err != nil {
			return err
		}
		_, err = pgx.ForEachRow(rows, []any{&id, &line}, func() error {
			*ids = append(*ids, id)
			h.lines = append(h.lines, []byte(line))
			h.keys = append(h.keys, keyOf(typ, id))
			return nil
		})
		return err
	}
	if err := read(hourEventsSQL, archive.TypeEvent, &h.events, tenant, hour, end); err != nil {
		return h, fmt.Errorf("reading events: %w", err)
	}
	if tenant == "" {
		if err := read(hourJobsSQL, archive.TypeJob, &h.job, hour, end); err != nil {
			return h, fmt.Errorf("reading River's jobs: %w", err)
		}
	}
	return h, nil
}

// Hour archives one hour of tenant's: see hours.
func (a *Archiver) Hour(ctx context.Context, tenant string, hour time.Time) (Stats, error) {
	return a.hours(ctx, tenant, []time.Time{hour})
}

// hours archives tenant's hours: each hour's object (the old one's lines,
// then the rows not in it), then the manifest once for them all, then
// their rows deleted in batches. One manifest write for a day of hours
// keeps a catch-up over a year of history from rewriting a growing
// manifest eight thousand times.
func (a *Archiver) hours(ctx context.Context, tenant string, hours []time.Time) (Stats, error) {
	var st Stats
	m, err := archive.ReadManifest(ctx, a.sink, tenant)
	if err != nil {
		return st, err
	}
	var todo []hourRows
	changed := false
	for _, hour := range hours {
		start := time.Now()
		h, ch, err := a.writeHour(ctx, tenant, hour, &m)
		if err == nil {
			err = a.rest(ctx, start)
		}
		if err != nil {
			return st, fmt.Errorf("archiving %q %s: %w", tenant, hour.Format(time.RFC3339), err)
		}
		st.Held += h.held
		changed = changed || ch
		h.hour = hour
		todo = append(todo, h)
	}
	if changed {
		if err := archive.WriteManifest(ctx, a.sink, m); err != nil {
			return st, fmt.Errorf("writing the manifest of %q: %w", tenant, err)
		}
		if err := a.step("manifest"); err != nil {
			return st, err
		}
	}
	for _, h := range todo {
		if len(h.commands)+len(h.events)+len(h.job) == 0 {
			continue
		}
		if err := a.deleteRows(ctx, h, &st); err != nil {
			return st, fmt.Errorf("deleting %q %s: %w", tenant, h.hour.Format(time.RFC3339), err)
		}
		st.Hours++
	}
	return st, nil
}

// writeHour writes hour's object when rows not yet in it remain, and sets
// its entry in m. It returns the rows to delete and whether m changed.
func (a *Archiver) writeHour(ctx context.Context, tenant string, hour time.Time, m *archive.Manifest) (hourRows, bool, error) {
	h, err := a.readHour(ctx, tenant, hour)
	if err != nil || len(h.lines) == 0 {
		return h, false, err
	}
	entry := archive.ObjectEntry{Key: archive.ObjectKey(tenant, hour), Hour: hour}
	old, listed := m.Entry(hour)
	if listed {
		entry = m.Objects[old]
	}
	// An object no manifest names is a crash's, between the two writes:
	// it holds only rows still in the database, so it is read unverified.
	lines, err := archive.ReadObject(ctx, a.sink, entry)
	if errors.Is(err, bundles.ErrNotFound) && !listed {
		lines, err = nil, nil
	}
	if err != nil {
		return h, false, fmt.Errorf("the object already there: %w", err)
	}
	seen := make(map[string]bool, len(lines)+len(h.lines))
	counts := map[string]int{}
	for _, l := range lines {
		typ, k, err := recordKey(l)
		if err != nil {
			return h, false, err
		}
		seen[k] = true
		counts[typ]++
	}
	added := 0
	for i, l := range h.lines {
		k := h.keys[i]
		typ, _, _ := strings.Cut(k, ":")
		if !seen[k] {
			seen[k] = true
			counts[typ]++
			lines = append(lines, l)
			added++
		}
	}
	h.lines, h.keys = nil, nil
	if added == 0 && listed {
		return h, false, nil
	}
	body, sum, err := archive.EncodeObject(lines)
	if err != nil {
		return h, false, err
	}
	if err := a.sink.Put(ctx, entry.Key, bytes.NewReader(body), int64(len(body))); err != nil {
		return h, false, fmt.Errorf("writing %s: %w", entry.Key, err)
	}
	if err := a.step("object"); err != nil {
		return h, false, err
	}
	entry.Commands, entry.Events, entry.Jobs = counts[archive.TypeCommand], counts[archive.TypeEvent], counts[archive.TypeJob]
	entry.Bytes, entry.SHA256 = int64(len(body)), sum
	m.Set(entry)
	a.logger.Debug("archived an hour", "tenant", tenant, "hour", hour.Format(time.RFC3339), "records", len(lines), "key", entry.Key)
	return h, true, nil
}

func (a *Archiver) step(name string) error {
	if a.crash == nil {
		return nil
	}
	return a.crash(name)
}

// The deletes, each guarded so that nothing but an archived row goes.
const (
	deleteCommandsSQL = `DELETE FROM commands WHERE id = ANY($1::text[])
		AND state IN ('succeeded', 'failed', 'rejected', 'expired', 'cancelled')`
	deleteEventsSQL = `DELETE FROM outbox WHERE id = ANY($1::text[]::bigint[])`
	deleteJobsSQL   = `DELETE FROM river_job WHERE id = ANY($1::text[]::bigint[]) AND finalized_at IS NOT NULL`
)

// deleteRows deletes h's rows, Batch ids a transaction, by primary key: each
// statement locks only settled rows that no enqueue or dispatch touches,
// and for as long as one batch takes.
func (a *Archiver) deleteRows(ctx context.Context, h hourRows, st *Stats) error {
	for _, part := range []struct {
		sql string
		ids []string
		n   *int
	}{{deleteCommandsSQL, h.commands, &st.Commands}, {deleteEventsSQL, h.events, &st.Events}, {deleteJobsSQL, h.job, &st.Jobs}} {
		for lo := 0; lo < len(part.ids); lo += a.opts.Batch {
			ids := part.ids[lo:min(len(part.ids), lo+a.opts.Batch)]
			start := time.Now()
			err := pgx.BeginFunc(ctx, a.pool, func(tx pgx.Tx) error {
				if a.opts.Renew != nil {
					ok, err := a.opts.Renew(ctx, tx)
					if err != nil {
						return err
					}
					if !ok {
						return ErrLeaseLost
					}
				}
				tag, err := tx.Exec(ctx, part.sql, ids)
				*part.n += int(tag.RowsAffected())
				return err
			})
			if err != nil {
				return err
			}
			if err := a.step("delete"); err != nil {
				return err
			}
			if err := a.rest(ctx, start); err != nil {
				return err
			}
		}
	}
	return nil
}

// ErrLeaseLost stops an archiver whose replica no longer holds the lease.
var ErrLeaseLost = errors.New("history archiver: lease lost")
