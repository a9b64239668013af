package queue

import (
	"context"
	"fmt"
	"time"
)

// failedStates are the ends the fleet overview counts as failures.
var failedStates = []string{string(Failed), string(Rejected), string(Expired)}

// CountFailedSince counts the tenant's commands that ended failed, rejected
// or expired after since, on the nodes whose resource name
// (compute-node/{id}) matches one of the LIKE patterns, or on any node when
// nodePatterns is nil: the fleet overview's failures of the last hour.
func CountFailedSince(ctx context.Context, db DBTX, tenantID string, since time.Time, nodePatterns []string) (int64, error) {
	var n int64
	err := db.QueryRow(ctx, `SELECT count(*) FROM commands c WHERE c.tenant_id = $1 AND c.state = ANY ($2::text[]) AND c.settled_at > $3
		AND ($4::text[] IS NULL OR ('compute-node/' || c.node_id) LIKE ANY ($4::text[]))`,
		tenantID, failedStates, since, nodePatterns).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("counting the failures since %s: %w", since.Format(time.RFC3339), err)
	}
	return n, nil
}

// PendingByLane counts the pending commands of every tenant by lane (over
// the open-commands index); a lane without any is absent.
func PendingByLane(ctx context.Context, db DBTX) (map[string]int64, error) {
	rows, err := db.Query(ctx, `SELECT lane, count(*) FROM commands WHERE state = 'pending' GROUP BY lane`)
	if err != nil {
		return nil, fmt.Errorf("counting pending commands by lane: %w", err)
	}
	defer rows.Close()
	out := map[string]int64{}
	for rows.Next() {
		var lane string
		var n int64
		if err := rows.Scan(&lane, &n); err != nil {
			return nil, fmt.Errorf("counting pending commands by lane: %w", err)
		}
		out[lane] = n
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("counting pending commands by lane: %w", err)
	}
	return out, nil
}
