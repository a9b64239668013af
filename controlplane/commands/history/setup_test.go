package history_test

import (
	"bytes"
	"context"
	"io"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/controlplane/commands/bundles"
	"github.com/better-compute/commands/controlplane/commands/history"
	"github.com/better-compute/commands/controlplane/internal/storetest"
)

// base is the seeded history's first hour: 100 days ago, whole.
var base = time.Now().UTC().Add(-100 * 24 * time.Hour).Truncate(time.Hour)

type bed struct {
	ctx   context.Context
	pool  *pgxpool.Pool
	store *bundles.DirStore
	root  string
}

func setup(t *testing.T) *bed {
	t.Helper()
	root := t.TempDir()
	store, err := bundles.NewDirStore(bundles.DirOptions{Root: root, BaseURL: "http://127.0.0.1/v1/blobs", Secret: bytes.Repeat([]byte("s"), 32)})
	require.NoError(t, err)
	return &bed{ctx: context.Background(), pool: storetest.DB(t), store: store, root: root}
}

// seed writes two tenants' history: in t1, three commands settled 100 days
// ago over two hours (with their queued and settled events), one still
// pending since then, one settled in a batch still awaiting approval, one
// settled yesterday; in t2 one old settled command; and a River job
// finished 100 days ago.
func (b *bed) seed(t *testing.T) {
	t.Helper()
	_, err := b.pool.Exec(b.ctx, `
		INSERT INTO tenants (id) VALUES ('t1'), ('t2');
		INSERT INTO nodes (id, tenant_id, next_cmd_seq) VALUES ('n1', 't1', 100), ('n2', 't1', 100), ('n3', 't2', 100);
		INSERT INTO command_batches (id, tenant_id, requester, reason, scope, tree_size, root_hash, statement, deadline)
		VALUES ('batch_open', 't1', 'alice', 'r', '{}', 1, '\x00', '\x00', now() + interval '1 day')`)
	require.NoError(t, err)
	cmd := func(id, tenant, node string, seq int, kind, state, requester string, settled *time.Time, batch string) {
		created := base
		if settled != nil {
			created = settled.Add(-time.Minute)
		}
		_, err := b.pool.Exec(b.ctx, `INSERT INTO commands (id, tenant_id, node_id, seq, kind, lane, not_after, created_at, settled_at, state, reason, message, requester, requested_via, batch_id, result)
			VALUES ($1, $2, $3, $4, $5, 'control', $6::timestamptz + interval '1 hour', $6, $7, $8, CASE WHEN $8 = 'failed' THEN 'exit-code' ELSE '' END,
			  'done', $9, 'api', $10, CASE WHEN $7::timestamptz IS NULL THEN NULL ELSE '{"ok": true}'::jsonb END)`,
			id, tenant, node, seq, kind, created, settled, state, requester, batch)
		require.NoError(t, err, id)
		for _, ev := range []struct {
			topic string
			at    time.Time
		}{{"node.command.queued", created}, {"command.settled", created.Add(30 * time.Second)}} {
			if ev.topic == "command.settled" && settled == nil {
				continue
			}
			_, err := b.pool.Exec(b.ctx, `INSERT INTO outbox (tenant_id, topic, payload, created_at) VALUES ($1, $2, jsonb_build_object('commandId', $3::text, 'nodeId', $4::text), $5)`,
				tenant, ev.topic, id, node, ev.at)
			require.NoError(t, err)
		}
	}
	at := func(d time.Duration) *time.Time { v := base.Add(d); return &v }
	cmd("cmd_a", "t1", "n1", 1, "diag.nvml", "succeeded", "alice", at(10*time.Minute), "")
	cmd("cmd_b", "t1", "n2", 1, "node.reboot", "failed", "bob", at(20*time.Minute), "")
	cmd("cmd_c", "t1", "n1", 2, "inventory.refresh", "succeeded", "bob", at(70*time.Minute), "")
	cmd("cmd_open", "t1", "n2", 2, "diag.nvml", "pending", "alice", nil, "")
	cmd("cmd_held", "t1", "n1", 3, "node.reboot", "cancelled", "carol", at(15*time.Minute), "batch_open")
	recent := time.Now().UTC().Add(-24 * time.Hour)
	cmd("cmd_recent", "t1", "n1", 4, "diag.nvml", "succeeded", "alice", &recent, "")
	cmd("cmd_t2", "t2", "n3", 1, "diag.nvml", "succeeded", "dave", at(10*time.Minute), "")
	_, err = b.pool.Exec(b.ctx, `INSERT INTO river_job (args, kind, max_attempts, queue, state, attempt, attempted_at, finalized_at, created_at, scheduled_at)
		VALUES ('{"commandId": "cmd_a"}', 'bc.owner_wake', 25, 'bc_owner_wakes', 'completed', 1, $1, $1, $1, $1)`, base.Add(5*time.Minute))
	require.NoError(t, err)
}

func (b *bed) count(t *testing.T, sql string, args ...any) int {
	t.Helper()
	var n int
	require.NoError(t, b.pool.QueryRow(b.ctx, sql, args...).Scan(&n))
	return n
}

func (b *bed) object(t *testing.T, key string) []byte {
	t.Helper()
	r, _, err := b.store.Open(b.ctx, key)
	require.NoError(t, err)
	defer r.Close()
	raw, err := io.ReadAll(r)
	require.NoError(t, err)
	return raw
}

func (b *bed) archiver(p history.Policy) *history.Archiver {
	return history.NewArchiver(b.pool, b.store, p, history.Options{Batch: 2})
}
