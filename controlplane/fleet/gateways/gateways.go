// Package gateways keeps the gateways table: which gateway processes hold
// node sessions, and how many each holds. Every gateway writes its own row
// every few seconds (Beat) and deletes it when it stops (Leave); the rows
// seen recently (Live) are the fleet's gateways, and Excess says how many
// sessions one of them holds beyond its share, which it then sheds so that
// its nodes reconnect, through the load balancer, to the others (issue 34:
// "what gateways do to shed load when one holds far more than the
// others").
package gateways

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/better-compute/commands/controlplane/internal/store"
)

// forgetAfter is how long a row that stopped beating is kept before Beat
// deletes it: long past any Live window, short enough that the table holds
// only this week's restarts.
const forgetAfter = time.Hour

// Gateway is one gateway's row.
type Gateway struct {
	// ID is the process's own id, drawn at start.
	ID string
	// Name is what nodes.session_gateway shows for its sessions.
	Name string
	// Sessions is how many node sessions it held at its last beat.
	Sessions int
	// StartedAt is its first beat; SeenAt its last.
	StartedAt, SeenAt time.Time
}

// Beat records that gateway id (named name) holds sessions node sessions
// now, and forgets the rows of gateways that stopped beating long ago.
func Beat(ctx context.Context, db store.DBTX, id, name string, sessions int) error {
	if _, err := db.Exec(ctx, `INSERT INTO gateways (id, name, sessions) VALUES ($1, $2, $3)
ON CONFLICT (id) DO UPDATE SET name = EXCLUDED.name, sessions = EXCLUDED.sessions, seen_at = now()`, id, name, sessions); err != nil {
		return fmt.Errorf("recording gateway %s's sessions: %w", id, err)
	}
	if _, err := db.Exec(ctx, `DELETE FROM gateways WHERE seen_at < now() - $1 * interval '1 second'`, forgetAfter.Seconds()); err != nil {
		return fmt.Errorf("forgetting gateways that stopped: %w", err)
	}
	return nil
}

// Live returns the gateways that beat within the last within, the most
// loaded first.
func Live(ctx context.Context, db store.DBTX, within time.Duration) ([]Gateway, error) {
	rows, err := db.Query(ctx, `SELECT id, name, sessions, started_at, seen_at FROM gateways
WHERE seen_at > now() - $1 * interval '1 second' ORDER BY sessions DESC, id`, within.Seconds())
	if err != nil {
		return nil, fmt.Errorf("reading the live gateways: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Gateway, error) {
		var g Gateway
		err := r.Scan(&g.ID, &g.Name, &g.Sessions, &g.StartedAt, &g.SeenAt)
		return g, err
	})
	if err != nil {
		return nil, fmt.Errorf("reading the live gateways: %w", err)
	}
	return out, nil
}

// Leave deletes gateway id's row: a gateway that stops cleanly no longer
// counts at once, rather than when its row goes stale.
func Leave(ctx context.Context, db store.DBTX, id string) error {
	if _, err := db.Exec(ctx, `DELETE FROM gateways WHERE id = $1`, id); err != nil {
		return fmt.Errorf("removing gateway %s's row: %w", id, err)
	}
	return nil
}

// Excess is how many of its held sessions a gateway should end so that
// the load evens out: none unless it holds more than above times the
// mean over every live gateway (live holds their counts, its own among
// them) and at least least sessions more than the mean; then as many as
// bring it down to the mean. The gap between the trigger (above) and the
// target (the mean) keeps gateways near their share from shedding back
// and forth: a gateway sheds only when another has room for what it ends.
func Excess(held int, live []int, above float64, least int) int {
	if len(live) < 2 || held <= 0 {
		return 0 // alone, or nothing to shed: there is nowhere else to go
	}
	total := 0
	for _, n := range live {
		total += max(n, 0)
	}
	mean := float64(total) / float64(len(live))
	if float64(held) <= above*mean || float64(held)-mean < float64(least) {
		return 0
	}
	return held - int(math.Ceil(mean))
}
