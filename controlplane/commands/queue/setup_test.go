package queue_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/controlplane/commands/events"
	"github.com/better-compute/commands/controlplane/commands/kinds"
	"github.com/better-compute/commands/controlplane/commands/queue"
	"github.com/better-compute/commands/controlplane/internal/errcode"
	"github.com/better-compute/commands/controlplane/internal/storetest"
	"github.com/better-compute/commands/sdk/kind"
)

// Test kinds: fixtures of this package, not copies of first-party manifests.
var (
	refreshKind = kind.Manifest{
		Kind: "test.refresh", Lane: kind.LaneControl, Timeout: kind.Duration(time.Minute),
		Roles: []string{"node", "discovery"}, Flags: kind.Flags{RetrySafe: true}, APIRunnable: true, Version: "1.0.0",
		PayloadSchema: json.RawMessage(`{"type":"object","properties":{"sections":{"type":"array","items":{"enum":["gpus","disks"]}},"rescan":{"type":"boolean"}},"additionalProperties":false}`),
	}
	rebootKind = kind.Manifest{
		Kind: "test.reboot", Lane: kind.LaneControl, Timeout: kind.Duration(10 * time.Minute),
		Roles: []string{"node"}, Flags: kind.Flags{Destructive: true, SelfTerminating: true}, APIRunnable: true, Version: "1.0.0",
	}
	wipeKind = kind.Manifest{
		Kind: "test.wipe", Lane: kind.LaneProvision, Timeout: kind.Duration(time.Hour),
		Roles: []string{"discovery"}, Flags: kind.Flags{Destructive: true, Attested: true}, Version: "1.0.0",
	}
)

// bundle is what most tests need: a migrated database of their own, a queue,
// and one tenant with one node.
type bundle struct {
	ctx    context.Context
	pool   *pgxpool.Pool
	q      *queue.Queue
	tenant queue.Tenant
	node   queue.Node
}

func setup(t *testing.T) *bundle {
	t.Helper()
	return setupPool(t, nil)
}

func setupPool(t *testing.T, adjust func(*pgxpool.Config)) *bundle {
	t.Helper()
	t.Parallel()
	ctx := context.Background()
	pool := storetest.DBConfig(t, adjust)
	reg, err := kinds.NewRegistry(refreshKind, rebootKind, wipeKind)
	require.NoError(t, err)
	q := queue.New(reg, hclog.NewNullLogger())
	ten, err := q.CreateTenant(ctx, pool, queue.Tenant{Name: "acme"})
	require.NoError(t, err)
	n, err := q.CreateNode(ctx, pool, queue.Node{TenantID: ten.ID})
	require.NoError(t, err)
	return &bundle{ctx: ctx, pool: pool, q: q, tenant: ten, node: n}
}

// params is an enqueue of test.refresh on the bundle's node.
func (b *bundle) params(key string) queue.EnqueueParams {
	return queue.EnqueueParams{
		TenantID: b.tenant.ID, NodeID: b.node.ID, Kind: refreshKind.Kind,
		Payload: json.RawMessage(`{"sections":["gpus"],"rescan":true}`), IdempotencyKey: key,
		NotAfter: time.Now().Add(5 * time.Minute),
	}
}

// committed runs fn in a transaction of its own, committed, and returns
// what it returned (n outcomes, one per item it was given).
func committed[T any](t *testing.T, b *bundle, n int, fn func(pgx.Tx) ([]T, error)) []T {
	t.Helper()
	var out []T
	require.NoError(t, pgx.BeginFunc(b.ctx, b.pool, func(tx pgx.Tx) error {
		var err error
		out, err = fn(tx)
		return err
	}))
	require.Len(t, out, n)
	return out
}

// enqueue queues p in its own committed transaction.
func (b *bundle) enqueue(t *testing.T, p queue.EnqueueParams) (queue.Command, bool) {
	t.Helper()
	var (
		cmd queue.Command
		dup bool
	)
	err := pgx.BeginFunc(b.ctx, b.pool, func(tx pgx.Tx) error {
		var err error
		cmd, dup, err = b.q.Enqueue(b.ctx, tx, p)
		return err
	})
	require.NoError(t, err)
	return cmd, dup
}

// enqueueErr queues p and returns the error (the transaction rolls back).
func (b *bundle) enqueueErr(p queue.EnqueueParams) error {
	return pgx.BeginFunc(b.ctx, b.pool, func(tx pgx.Tx) error {
		_, _, err := b.q.Enqueue(b.ctx, tx, p)
		return err
	})
}

func (b *bundle) cancel(t *testing.T, nodeID, commandID string) (queue.Command, error) {
	t.Helper()
	var cmd queue.Command
	err := pgx.BeginFunc(b.ctx, b.pool, func(tx pgx.Tx) error {
		var err error
		cmd, err = b.q.Cancel(b.ctx, tx, nodeID, commandID)
		return err
	})
	return cmd, err
}

func (b *bundle) transition(t *testing.T, tr queue.Transition) (queue.Command, bool) {
	t.Helper()
	cmd, changed, err := b.q.Transition(b.ctx, b.pool, tr)
	require.NoError(t, err)
	return cmd, changed
}

// outbox reads every event in the outbox, committed or not yet readable
// through the cursor, straight from the table.
func (b *bundle) outbox(t *testing.T, topic string) []map[string]any {
	t.Helper()
	rows, err := b.pool.Query(b.ctx, `SELECT payload FROM outbox WHERE topic = $1 ORDER BY id`, topic)
	require.NoError(t, err)
	defer rows.Close()
	var out []map[string]any
	for rows.Next() {
		var p map[string]any
		require.NoError(t, rows.Scan(&p))
		out = append(out, p)
	}
	require.NoError(t, rows.Err())
	return out
}

// readAll reads the events readable through the cursor API.
func (b *bundle) readAll(t *testing.T) []events.Event {
	t.Helper()
	evs, err := events.Read(b.ctx, b.pool, "", "", 0)
	require.NoError(t, err)
	return evs
}

func requireCode(t *testing.T, err error, code errcode.Code) *errcode.Error {
	t.Helper()
	require.Error(t, err)
	var qe *errcode.Error
	require.ErrorAs(t, err, &qe, "want a *errcode.Error with %s, got %v", code, err)
	require.Equal(t, code, qe.Code, "error: %v", err)
	return qe
}
