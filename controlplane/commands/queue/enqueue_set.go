package queue

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/better-compute/commands/controlplane/commands/events"
	"github.com/better-compute/commands/controlplane/internal/errcode"
	"github.com/better-compute/commands/controlplane/internal/pgtx"
	"github.com/better-compute/commands/sdk/kind"
)

// ErrKeyRace is EnqueueSet's answer when another transaction queued one of
// its idempotency keys while it ran, on a node where a command of the set
// already took a later seq: the transaction must be rolled back and the
// set run again (commands.run's group then runs each caller alone, where
// the key is found as a duplicate). Nothing is left with a gap.
var ErrKeyRace = errors.New("an idempotency key was queued by another transaction during this enqueue: roll back and run it again")

// EnqueueOutcome is what one command of an EnqueueSet came to: the command
// queued (Duplicate false), the one already queued under its idempotency
// key (Duplicate true), or Err, the error Enqueue would have returned for
// it alone (nothing of it was written).
type EnqueueOutcome struct {
	Command   Command
	Duplicate bool
	Err       error
}

// enqueueSeqSQL takes the next seqs of the items' nodes, one per item that
// its node accepts (its tenant, not deleted, the restricted identity's
// kinds, the kind's roles) and that is not a duplicate, in item order per
// node, and answers each such item with its tenant, seq, the transaction's
// now() (created_at) and its payload as jsonb stores it: the command's
// bytes are made from exactly what its row will hold.
var enqueueSeqSQL = `
WITH p AS (
  SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[])
    WITH ORDINALITY AS p(node_id, tenant_id, kind, key, roles, payload, ord)
), ok AS (
  SELECT p.ord, p.node_id FROM p,
    LATERAL (SELECT * FROM nodes n WHERE n.id = p.node_id LIMIT 1) n,
    LATERAL (SELECT count(*) AS n FROM (SELECT 1 FROM commands c WHERE p.key <> '' AND ` + keyProbe("c", "p.node_id", "p.key") + ` LIMIT 1) d) dup
  WHERE (p.tenant_id = '' OR n.tenant_id = p.tenant_id) AND n.deleted_at IS NULL
    AND (n.allowed_kinds IS NULL OR p.kind = ANY (n.allowed_kinds))
    AND n.role = ANY (string_to_array(p.roles, ','))
    AND dup.n = 0
), bump AS (
  UPDATE nodes n SET next_cmd_seq = n.next_cmd_seq + w.cnt
  FROM (SELECT node_id, count(*) AS cnt FROM ok GROUP BY node_id) w
  WHERE n.id = w.node_id AND n.id = ANY ($1::text[]) -- an index path under any cached plan
  RETURNING n.id, n.tenant_id, n.next_cmd_seq - w.cnt AS base
)
SELECT ok.ord, bump.tenant_id, bump.base + row_number() OVER (PARTITION BY ok.node_id ORDER BY ok.ord) - 1, now(), p.payload::jsonb
FROM ok JOIN bump ON bump.id = ok.node_id JOIN p ON p.ord = ok.ord`

// enqueueInsertSQL inserts the new commands, their bytes and signatures
// with them, and publishes node.command.queued for each. It returns only
// the ids it inserted: every other column is what the statement was given
// or a column's default, which enqueueRound already holds (stored), and
// reading back some 40 columns a command, its bytes among them, was a
// tenth of what commands.run cost the API server.
var enqueueInsertSQL = `
WITH ins AS (
  INSERT INTO commands AS c (id, tenant_id, node_id, seq, kind, lane, payload, idempotency_key,
    not_after, not_before, min_generation, retry_safe, destructive, self_terminating, attested,
    batch_id, bundle_key, awaiting_approval, trace_parent, created_at, updated_at, command_bytes, signature, worker_cert,
    requester, requested_via)
  SELECT id, tenant_id, node_id, seq, kind, lane, payload, NULLIF(key, ''),
    not_after, not_before, min_generation, retry_safe, destructive, self_terminating, attested,
    batch_id, bundle_key, awaiting_approval, trace_parent, created_at, created_at, command_bytes, signature, worker_cert,
    requester, requested_via
  FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[], $5::text[], $6::text[], $7::jsonb[], $8::text[],
    $9::timestamptz[], $10::timestamptz[], $11::bigint[], $12::bool[], $13::bool[], $14::bool[], $15::bool[],
    $16::text[], $17::text[], $18::bool[], $19::text[], $20::timestamptz[], $21::bytea[], $22::bytea[], $23::bytea[],
    $24::text[], $25::text[])
    AS t(id, tenant_id, node_id, seq, kind, lane, payload, key, not_after, not_before, min_generation,
      retry_safe, destructive, self_terminating, attested, batch_id, bundle_key, awaiting_approval, trace_parent,
      created_at, command_bytes, signature, worker_cert, requester, requested_via)
  ` + onKeyConflict + `
  RETURNING c.id, c.tenant_id, c.node_id, c.kind, c.state
), ev AS (
  INSERT INTO outbox (tenant_id, topic, payload)
  SELECT tenant_id, '` + events.TopicCommandQueued + `',
    jsonb_build_object('nodeId', node_id, 'commandId', id, 'kind', kind, 'state', state)
  FROM ins
)
SELECT id FROM ins`

// onKeyConflict is where enqueueInsertSQL meets a key that another
// transaction queued after the duplicates were read. The insert waits for
// that transaction and skips the row, which enqueueRound then answers as a
// duplicate. enqueueFinalSQL, which travels with COMMIT, fails instead
// (unique_violation): nothing is committed, and commands.run's group runs
// each caller again alone, without a final statement, where the key is
// found as a duplicate.
const onKeyConflict = `ON CONFLICT (node_id, idempotency_key) DO NOTHING`

// enqueueFinalSQL is enqueueInsertSQL for an insert sent with the
// transaction's COMMIT (pgtx.SendFinal).
var enqueueFinalSQL = strings.Replace(enqueueInsertSQL, onKeyConflict, "", 1)

// EnqueueSet queues many commands in tx with the semantics of Enqueue for
// each (its checks, its errors, idempotency, a gapless seq per node, the
// command's bytes and signature stored with it, node.command.queued), in
// two statements for all of them instead of two round trips each: what
// lets commands.run's concurrent callers, sharing one transaction, cost the
// database less than a transaction each (BenchmarkRunThroughput). out[i]
// is ps[i]'s outcome; an item's own error (a kind or payload refused, a
// node not found, a key reused for another kind) writes nothing of it and
// leaves the others and tx as they were. The error returned is the
// database's: tx is then not usable. The same idempotency key on one node
// twice goes in a later round, so the second is the first's duplicate.
//
// When ctx carries the transaction's pgtx.Final (commands.run's group), the
// last round's insert travels with COMMIT, and a key that another
// transaction queued meanwhile fails the call instead of becoming a
// duplicate (see onKeyConflict); tx is not usable after it.
func (q *Queue) EnqueueSet(ctx context.Context, tx pgx.Tx, ps []EnqueueParams) ([]EnqueueOutcome, error) {
	out := make([]EnqueueOutcome, len(ps))
	rs := rounds(len(ps), func(i int) string {
		if ps[i].IdempotencyKey == "" {
			return ""
		}
		return ps[i].NodeID + "\x00" + ps[i].IdempotencyKey
	})
	for k, round := range rs {
		final := k == len(rs)-1 && pgtx.HasFinal(ctx)
		if err := q.enqueueRound(ctx, tx, ps, round, out, final); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// checked is one item of a round that passed Enqueue's own checks.
type checked struct {
	i        int // index in ps
	m        kind.Manifest
	payload  []byte
	notAfter time.Time
}

// seqd is what the seq statement returns for an item its node took.
type seqd struct {
	tenant  string
	seq     int64
	created time.Time
	payload []byte
}

// enqueueRound queues one round (no idempotency key twice on a node) in
// steps that each read top-down: Enqueue's own checks (checkRound), one
// round trip for the seqs (takeSeqs), the rows made and signed (newRows),
// one round trip for the insert, and the outcomes, where a row another
// transaction queued under the same key meanwhile becomes that row's
// duplicate and gives its seq back (settleInserted).
func (q *Queue) enqueueRound(ctx context.Context, tx pgx.Tx, ps []EnqueueParams, round []int, out []EnqueueOutcome, final bool) error {
	items := q.checkRound(ps, round, out)
	if len(items) == 0 {
		return nil
	}
	seqs, err := takeSeqs(ctx, tx, ps, items, final)
	if err != nil {
		return err
	}
	rows, err := q.newRows(ctx, tx, ps, items, seqs, out)
	if err != nil || rows.len() == 0 {
		return err
	}
	inserted, err := rows.insert(ctx, tx, final)
	if err != nil {
		return err
	}
	return rows.settleInserted(ctx, tx, ps, inserted, out)
}

// checkRound runs Enqueue's own checks on the round's items: a refused item
// gets its error in out and is left out.
func (q *Queue) checkRound(ps []EnqueueParams, round []int, out []EnqueueOutcome) []checked {
	var items []checked
	for _, i := range round {
		m, payload, err := q.check(ps[i])
		if err != nil {
			out[i] = EnqueueOutcome{Err: err}
			continue
		}
		notAfter := ps[i].NotAfter
		if notAfter.IsZero() {
			notAfter = q.nowFunc().Add(DefaultNotAfter)
		}
		items = append(items, checked{i: i, m: m, payload: payload, notAfter: notAfter})
	}
	return items
}

// takeSeqs takes, in one round trip under generic plans (see
// genericPlans), the seqs of the items their nodes take, by index into
// items. An item with a key already queued gets no seq; newRows reads it
// back, which only a retry pays for.
func takeSeqs(ctx context.Context, tx pgx.Tx, ps []EnqueueParams, items []checked, final bool) (map[int]seqd, error) {
	n := len(items)
	nodes, tenants, kinds, keys, roles, payloads := make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	for j, it := range items {
		p := ps[it.i]
		nodes[j], tenants[j], kinds[j], keys[j], roles[j], payloads[j] = p.NodeID, p.TenantID, p.Kind, p.IdempotencyKey, strings.Join(it.m.Roles, ","), string(it.payload)
	}
	b := &pgx.Batch{}
	genericPlans(b, true)
	seqs := map[int]seqd{}
	b.Queue(enqueueSeqSQL, nodes, tenants, kinds, keys, roles, payloads).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			var (
				ord int64
				s   seqd
			)
			if err := rows.Scan(&ord, &s.tenant, &s.seq, &s.created, &s.payload); err != nil {
				return err
			}
			seqs[int(ord)-1] = s
		}
		return rows.Err()
	})
	if !final {
		// The final round's insert goes with COMMIT: nothing runs after
		// it in the transaction that the settings could reach.
		genericPlans(b, false)
	}
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return nil, fmt.Errorf("enqueueing %d commands: taking their seqs: %w", n, err)
	}
	return seqs, nil
}

// genericPlans queues, on b, the statement that makes the transaction's
// next statements run on their generic plans (on) or as the session would
// again (off). PostgreSQL otherwise plans a statement over arrays afresh on
// every execution: a custom plan, sized for the arrays it was given, looks
// cheaper than a generic one sized for arrays of unknown length, so the
// plan cache never settles on the generic plan. Planning EnqueueSet's two
// lookups cost more than running them (0.24 ms and 0.11 ms a call against
// 0.10 and 0.02; BenchmarkRunThroughput with pg_stat_statements). The
// statements are written to run well on any plan (LATERAL probes, an
// index condition on the node ids, keyProbe), so a generic plan is built
// once per connection and kept. That plan is often built while the tables
// are small, where reading a whole table costs less than an index probe,
// and kept after they have grown: enable_seqscan is off while it is built,
// so each table is read through an index (without it, the seq's UPDATE
// read every node of the fleet; TestEnqueueSetsGenericPlansBuiltOnEmpty…).
func genericPlans(b *pgx.Batch, on bool) {
	for _, s := range genericPlanSettings(on) {
		b.Queue(s).Exec(func(pgconn.CommandTag) error { return nil })
	}
}

// genericPlanSettings are genericPlans' statements.
func genericPlanSettings(on bool) []string {
	if !on {
		return []string{`SET LOCAL plan_cache_mode TO DEFAULT`, `SET LOCAL enable_seqscan TO DEFAULT`}
	}
	// One statement for both: a commands.run group pays for it once.
	return []string{`SELECT set_config('plan_cache_mode', 'force_generic_plan', true), set_config('enable_seqscan', 'off', true)`}
}

// stored is c as its row reads once enqueueRound's insert stored it: what
// the insert gave each column, the columns' defaults for the rest
// (TestEnqueueSetReturnsTheCommandAsItsRowReads holds the two together).
func stored(c Command, m kind.Manifest, p EnqueueParams, wire, sig, cert []byte) Command {
	c.State, c.UpdatedAt = Pending, c.CreatedAt
	c.Flags = kind.Flags{RetrySafe: m.Flags.RetrySafe, Destructive: m.Flags.Destructive,
		SelfTerminating: m.Flags.SelfTerminating, Attested: m.Flags.Attested}
	c.BundleKey, c.AwaitingApproval, c.TraceParent = p.BundleKey, p.AwaitingApproval, p.TraceParent
	c.Requester, c.RequestedVia = p.Requester, p.RequestedVia
	c.CommandBytes, c.Signature, c.WorkerCert = wire, sig, cert
	// As pgx reads a timestamptz back.
	c.NotAfter = c.NotAfter.Local()
	if c.NotBefore != nil {
		nb := c.NotBefore.Local()
		c.NotBefore = &nb
	}
	return c
}

// duplicateOf answers p with d, the command its idempotency key already
// names: p's duplicate when it is of the same kind, a conflict otherwise.
func duplicateOf(d Command, p EnqueueParams) EnqueueOutcome {
	if d.Kind != p.Kind {
		return EnqueueOutcome{Err: errcode.Newf(errcode.Conflict, "idempotency-key-reused",
			map[string]string{"kind": d.Kind, "commandId": d.ID},
			"idempotency key already names command %s of kind %s, not %s", d.ID, d.Kind, p.Kind)}
	}
	return EnqueueOutcome{Command: d, Duplicate: true}
}

// byKey reads the command queued on nodeID under key: a retry's, or the
// one a concurrent transaction queued while an EnqueueSet ran.
func byKey(ctx context.Context, tx pgx.Tx, nodeID, key string) (Command, error) {
	return scanCommand(tx.QueryRow(ctx, byKeySQL, nodeID, key))
}

var byKeySQL = `SELECT ` + commandColumns("c") + ` FROM commands c WHERE ` + keyProbe("c", "$1", "$2")

// keyProbe is the condition that finds the command of node under key in
// commands (alias c): it compares under the "C" collation, which only the
// key's unique index (commands_node_key_probe, migration 0070) matches, so
// no cached plan can probe through another index that starts with node_id
// and read all of a node's commands. Equality of text is the same under
// every deterministic collation, so it finds exactly the rows that plain
// equality would.
func keyProbe(c, node, key string) string {
	return c + `.node_id COLLATE "C" = ` + node + ` AND ` + c + `.idempotency_key COLLATE "C" = ` + key
}
