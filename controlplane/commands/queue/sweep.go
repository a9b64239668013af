package queue

import (
	"context"
	"fmt"
	"github.com/better-compute/commands/sdk/kind"
	"time"
)

// Sweep reasons, in the spec's words.
const (
	ReasonNotAfter = kind.ReasonNotAfter
	ReasonTimeout  = kind.ReasonTimeout
)

// UnregisteredKindTimeout is the timeout of a kind that is no longer
// registered: "A kind that is no longer registered gets 15 minutes."
const UnregisteredKindTimeout = 15 * time.Minute

// expireSQL expires pending commands past not_after. The inner SELECT walks
// the partial not_after index (commands_unsettled_by_not_after, whose
// predicate settled_at IS NULL only the sweeper's statements name: see
// migration 0080) and skips rows another sweeper or a report holds; the
// outer UPDATE re-checks the state, so a command dispatched in between is
// left alone.
var expireSQL = `
WITH u AS (
  UPDATE commands c SET state = 'expired', reason = '` + ReasonNotAfter + `', settled_at = now(), updated_at = now(),
    -- A command that expired waiting says on what (it keeps its
    -- waiting_reason, waiting_message and waiting_detail too).
    message = CASE WHEN c.message = '' AND c.waiting_message <> '' THEN 'it waited: ' || c.waiting_message ELSE c.message END
  WHERE c.id IN (
    SELECT id FROM commands
    WHERE settled_at IS NULL AND state = 'pending' AND not_after < now()
    ORDER BY not_after LIMIT $1
    FOR UPDATE SKIP LOCKED)
  AND c.state = 'pending'
  RETURNING ` + commandColumns("c") + `
), ev AS (` + settledEventSQL + `)
SELECT * FROM u`

// failOverdueSQL fails in-flight commands past not_after plus their kind's
// timeout ($2/$3 carry the registry's timeouts; $4 is the timeout of a kind
// missing from them).
var failOverdueSQL = `
WITH t AS (
  SELECT * FROM unnest($2::text[], $3::bigint[]) AS t(kind, timeout_us)
), u AS (
  UPDATE commands c SET state = 'failed', reason = '` + ReasonTimeout + `', settled_at = now(), updated_at = now()
  WHERE c.id IN (
    SELECT o.id FROM commands o LEFT JOIN t ON t.kind = o.kind
    WHERE o.settled_at IS NULL AND o.state IN ('dispatched', 'acked', 'running') AND o.not_after < now()
      AND o.not_after + coalesce(t.timeout_us, $4) * interval '1 microsecond' < now()
    ORDER BY o.not_after LIMIT $1
    FOR UPDATE OF o SKIP LOCKED)
  AND c.state IN ('dispatched', 'acked', 'running')
  RETURNING ` + commandColumns("c") + `
), ev AS (` + settledEventSQL + `)
SELECT * FROM u`

// Sweep enforces the deadlines once, for at most limit commands of each
// sort: a pending command past not_after becomes expired (reason not_after);
// a dispatched, acked or running one past not_after plus its kind's timeout
// becomes failed (reason timeout), with UnregisteredKindTimeout for a kind
// the registry no longer holds. Each is one guarded UPDATE that publishes
// command.settled per command. The CommandSweeper calls it every 5 seconds
// from the leader.
func (q *Queue) Sweep(ctx context.Context, db DBTX, limit int) (expired, failed []Command, err error) {
	err = q.settling(ctx, db, func(db DBTX) ([]Command, error) {
		var err error
		expired, failed, err = q.sweep(ctx, db, limit)
		return append(append([]Command(nil), expired...), failed...), err
	})
	if err != nil {
		return nil, nil, err
	}
	return expired, failed, nil
}

func (q *Queue) sweep(ctx context.Context, db DBTX, limit int) (expired, failed []Command, err error) {
	if limit <= 0 {
		limit = 1000
	}
	rows, err := db.Query(ctx, expireSQL, limit)
	if err != nil {
		return nil, nil, fmt.Errorf("expiring pending commands: %w", err)
	}
	if expired, err = scanCommands(rows); err != nil {
		return nil, nil, fmt.Errorf("expiring pending commands: %w", err)
	}
	var (
		names    []string
		timeouts []int64
	)
	for _, m := range q.reg.All() {
		names = append(names, m.Kind)
		timeouts = append(timeouts, m.Timeout.D().Microseconds())
	}
	rows, err = db.Query(ctx, failOverdueSQL, limit, names, timeouts, UnregisteredKindTimeout.Microseconds())
	if err != nil {
		return expired, nil, fmt.Errorf("failing overdue commands: %w", err)
	}
	if failed, err = scanCommands(rows); err != nil {
		return expired, nil, fmt.Errorf("failing overdue commands: %w", err)
	}
	if len(expired)+len(failed) > 0 {
		q.logger.Debug("swept", "expired", len(expired), "failed", len(failed))
	}
	return expired, failed, nil
}
