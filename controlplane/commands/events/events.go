// Package events is the control plane's event outbox. An event is written in
// the transaction that caused it (so a rollback leaves none), announced with
// NOTIFY on Channel when that transaction commits, and read from a cursor.
//
// Positions follow commit order, not id order: a transaction that took a
// lower id can commit after one with a higher id, and a reader that had moved
// past would never see it. So Read returns only events of transactions older
// than every transaction still running in this database (the SQL function
// bc_outbox_horizon), ordered by the writer's transaction id and then the
// event id; no later commit can sort below the cursor. The price is that a
// long open transaction in the control plane's database holds delivery back
// until it ends.
package events

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/better-compute/commands/controlplane/internal/store"
)

// Channel is the NOTIFY channel that announces new events.
const Channel = "bc_events"

// The topics the command queue writes.
const (
	TopicCommandQueued          = "node.command.queued"
	TopicCommandCancelRequested = "node.command.cancel-requested"
	TopicCommandSettled         = "command.settled"
	// TopicCommandWaiting says why a pending command is held (a kind the
	// node runs at another digest, does not load, or whose plugin it
	// refused), once per change.
	TopicCommandWaiting = "node.command.waiting"
)

// MaxReadLimit caps one Read.
const MaxReadLimit = 1000

// ErrBadCursor is wrapped when a cursor does not parse.
var ErrBadCursor = errors.New("malformed event cursor")

// Event is one row of the outbox.
type Event struct {
	// ID is the event's unique id.
	ID int64
	// Cursor is the position just after this event: pass it to Read to
	// continue after it.
	Cursor string
	// TenantID is the tenant the event belongs to; "" for a fleet event.
	TenantID string
	// Topic names the event, such as "command.settled".
	Topic string
	// Payload is the event's JSON object.
	Payload json.RawMessage
	// CreatedAt is when the writing transaction inserted it.
	CreatedAt time.Time
}

// Write inserts an event in tx; it becomes visible, and NOTIFY goes out, when
// tx commits. payload is marshalled to JSON (a json.RawMessage passes as is).
func Write(ctx context.Context, tx store.DBTX, tenantID, topic string, payload any) error {
	b, err := json.Marshal(payload)
	if err != nil {
		return fmt.Errorf("event %s: marshalling payload: %w", topic, err)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO outbox (tenant_id, topic, payload) VALUES ($1, $2, $3)`, tenantID, topic, b); err != nil {
		return fmt.Errorf("event %s: writing outbox: %w", topic, err)
	}
	return nil
}

// Read returns up to limit events after cursor ("" reads from the start),
// oldest first. tenantID "" reads every tenant's events. Run it on a pool or
// a READ COMMITTED transaction: a REPEATABLE READ snapshot taken before the
// horizon could hide an event below it.
func Read(ctx context.Context, db store.DBTX, tenantID, after string, limit int) ([]Event, error) {
	txid, id, err := ParseCursor(after)
	if err != nil {
		return nil, err
	}
	if limit <= 0 || limit > MaxReadLimit {
		limit = MaxReadLimit
	}
	rows, err := db.Query(ctx, `
		SELECT id, txid::text, tenant_id, topic, payload, created_at
		FROM bc_outbox_read($1::text::xid8, $2, $3, $4)`, strconv.FormatUint(txid, 10), id, tenantID, limit)
	if err != nil {
		return nil, fmt.Errorf("reading events: %w", err)
	}
	defer rows.Close()
	var out []Event
	for rows.Next() {
		var (
			e  Event
			tx string
		)
		if err := rows.Scan(&e.ID, &tx, &e.TenantID, &e.Topic, &e.Payload, &e.CreatedAt); err != nil {
			return nil, fmt.Errorf("reading events: %w", err)
		}
		e.Cursor = tx + "." + strconv.FormatInt(e.ID, 10)
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("reading events: %w", err)
	}
	return out, nil
}

// Head returns a cursor at the current end of the outbox: Read from it
// returns only events that are not yet readable now. Use it to follow from
// "now" without replaying history.
func Head(ctx context.Context, db store.DBTX) (string, error) {
	var h string
	if err := db.QueryRow(ctx, `SELECT bc_outbox_horizon()::text`).Scan(&h); err != nil {
		return "", fmt.Errorf("reading the outbox head: %w", err)
	}
	// (horizon, 0) sorts after every readable event and before every event of
	// a transaction that was still running.
	return h + ".0", nil
}

// ParseCursor splits a cursor into the writer's transaction id and the
// event id. "" is the start of the outbox.
func ParseCursor(c string) (txid uint64, id int64, err error) {
	if c == "" {
		return 0, 0, nil
	}
	a, b, ok := strings.Cut(c, ".")
	if !ok {
		return 0, 0, fmt.Errorf("%w: %q", ErrBadCursor, c)
	}
	txid, err = strconv.ParseUint(a, 10, 64)
	if err != nil {
		return 0, 0, fmt.Errorf("%w: %q", ErrBadCursor, c)
	}
	id, err = strconv.ParseInt(b, 10, 64)
	if err != nil || id < 0 {
		return 0, 0, fmt.Errorf("%w: %q", ErrBadCursor, c)
	}
	return txid, id, nil
}
