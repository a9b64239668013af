package queue

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/better-compute/commands/controlplane/internal/ids"
	"github.com/better-compute/commands/controlplane/internal/pgtx"
	"github.com/better-compute/commands/internal/trust"
	"github.com/better-compute/commands/sdk/kind"
	"github.com/jackc/pgx/v5"
)

// The rows of one EnqueueSet round: made and signed, inserted in one
// statement of one array a column, and answered.

// newRow is one command to insert: its row as it will read (cmd), and
// what of its parameters the row keeps beside it.
type newRow struct {
	item int // index in ps
	cmd  Command
	p    EnqueueParams
	m    kind.Manifest
	wire []byte
	sig  []byte
	cert []byte
}

// insertRows are a round's new commands, in the insert's order.
type insertRows []newRow

func (r insertRows) len() int { return len(r) }

// newRows makes the commands of the items their nodes took, their bytes
// made (and signed) from what their rows will hold. An item its node did
// not take is answered in out: the duplicate of a key queued by another
// transaction that committed after the duplicates were read, or, as
// Enqueue says, why not.
func (q *Queue) newRows(ctx context.Context, tx pgx.Tx, ps []EnqueueParams, items []checked, seqs map[int]seqd, out []EnqueueOutcome) (insertRows, error) {
	var rows insertRows
	signer := q.Signer()
	for j, it := range items {
		p := ps[it.i]
		s, ok := seqs[j]
		if !ok {
			if p.IdempotencyKey != "" {
				d, err := byKey(ctx, tx, p.NodeID, p.IdempotencyKey)
				if err == nil {
					out[it.i] = duplicateOf(d, p)
					continue
				}
				if !errors.Is(err, pgx.ErrNoRows) {
					return nil, fmt.Errorf("enqueueing %s on %s: reading its idempotency key: %w", p.Kind, p.NodeID, err)
				}
			}
			out[it.i] = EnqueueOutcome{Err: q.enqueueMiss(ctx, tx, p, it.m)}
			continue
		}
		c := Command{
			ID: ids.NewCommand(), TenantID: s.tenant, NodeID: p.NodeID, Seq: s.seq, Kind: p.Kind, Lane: it.m.Lane,
			Payload: s.payload, IdempotencyKey: p.IdempotencyKey, NotAfter: it.notAfter.Truncate(time.Microsecond),
			MinGeneration: p.MinGeneration, BatchID: p.BatchID, CreatedAt: s.created, SecretRefs: p.SecretRefs,
		}
		if p.NotBefore != nil {
			nb := p.NotBefore.Truncate(time.Microsecond)
			c.NotBefore = &nb
		}
		wire, err := MarshalCommand(c)
		if err != nil {
			return nil, err
		}
		var sig, cert []byte
		if signer != nil {
			// Signed in the enqueue transaction: a command is never stored
			// unsigned while signing is on, and the bytes signed are the
			// bytes stored.
			if sig, cert, err = signer.Sign(trust.PurposeCommand, wire); err != nil {
				return nil, fmt.Errorf("signing command %s: %w", c.ID, err)
			}
		}
		rows = append(rows, newRow{item: it.i, cmd: c, p: p, m: it.m, wire: wire, sig: sig, cert: cert})
	}
	return rows, nil
}

// args are the insert's parameters: one array a column, in
// enqueueInsertSQL's order.
func (r insertRows) args() []any {
	n := len(r)
	var (
		ids, tenants, nodes, kinds, lanes, payloads, keys = make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		batches, bundles, tps, reqs, vias                 = make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		seqs, gens                                        = make([]int64, n), make([]int64, n)
		notAfter, created                                 = make([]time.Time, n), make([]time.Time, n)
		notBefore                                         = make([]*time.Time, n)
		retry, destr, self, attest, await                 = make([]bool, n), make([]bool, n), make([]bool, n), make([]bool, n), make([]bool, n)
		wires, sigs, certs                                = make([][]byte, n), make([][]byte, n), make([][]byte, n)
	)
	for k, row := range r {
		c, p, f := row.cmd, row.p, row.m.Flags
		ids[k], tenants[k], nodes[k], kinds[k], lanes[k], payloads[k], keys[k] = c.ID, c.TenantID, c.NodeID, c.Kind, string(c.Lane), string(c.Payload), p.IdempotencyKey
		batches[k], bundles[k], tps[k], reqs[k], vias[k] = p.BatchID, p.BundleKey, p.TraceParent, p.Requester, p.RequestedVia
		seqs[k], gens[k] = c.Seq, p.MinGeneration
		notAfter[k], created[k], notBefore[k] = c.NotAfter, c.CreatedAt, c.NotBefore
		retry[k], destr[k], self[k], attest[k], await[k] = f.RetrySafe, f.Destructive, f.SelfTerminating, f.Attested, p.AwaitingApproval
		wires[k], sigs[k], certs[k] = row.wire, row.sig, row.cert
	}
	return []any{ids, tenants, nodes, seqs, kinds, lanes, payloads, keys,
		notAfter, notBefore, gens, retry, destr, self, attest, batches, bundles, await, tps, created, wires, sigs, certs,
		reqs, vias}
}

// insert inserts the rows in one round trip (with COMMIT when final) and
// returns the ids the database inserted.
func (r insertRows) insert(ctx context.Context, tx pgx.Tx, final bool) (map[string]bool, error) {
	inserted := make(map[string]bool, len(r))
	insert, send := enqueueInsertSQL, func(b *pgx.Batch) error { return tx.SendBatch(ctx, b).Close() }
	if final {
		insert, send = enqueueFinalSQL, func(b *pgx.Batch) error { return pgtx.SendFinal(ctx, tx, b) }
	}
	b := &pgx.Batch{}
	b.Queue(insert, r.args()...).Query(func(rows pgx.Rows) error {
		var id string
		for rows.Next() {
			if err := rows.Scan(&id); err != nil {
				return err
			}
			inserted[id] = true
		}
		return rows.Err()
	})
	if err := send(b); err != nil {
		return nil, fmt.Errorf("enqueueing %d commands: %w", len(r), err)
	}
	if final && len(inserted) != len(r) {
		// Cannot happen: without ON CONFLICT every row is inserted or
		// the statement fails.
		return nil, fmt.Errorf("enqueueing %d commands: the database returned %d", len(r), len(inserted))
	}
	return inserted, nil
}

// settleInserted answers each row in out. A row missing from what the
// insert returned met a row that another transaction queued under the same
// key after the duplicates were read (the insert waited for it to commit):
// it is that row's duplicate, and its seq goes back to its node, gapless,
// when no command of this round took a later one there (ErrKeyRace
// otherwise).
func (r insertRows) settleInserted(ctx context.Context, tx pgx.Tx, ps []EnqueueParams, inserted map[string]bool, out []EnqueueOutcome) error {
	top := map[string]int64{}
	var lost []newRow
	for _, row := range r {
		if !inserted[row.cmd.ID] {
			lost = append(lost, row)
			continue
		}
		top[row.cmd.NodeID] = max(top[row.cmd.NodeID], row.cmd.Seq)
	}
	back := map[string]int64{}
	for _, row := range lost {
		if row.cmd.Seq < top[row.cmd.NodeID] {
			return ErrKeyRace
		}
		back[row.cmd.NodeID]++
	}
	for node, n := range back {
		if _, err := tx.Exec(ctx, `UPDATE nodes SET next_cmd_seq = next_cmd_seq - $2 WHERE id = $1`, node, n); err != nil {
			return fmt.Errorf("returning the seqs of %d duplicate enqueue(s): %w", n, err)
		}
	}
	for _, row := range r {
		p := ps[row.item]
		if !inserted[row.cmd.ID] {
			d, err := byKey(ctx, tx, p.NodeID, p.IdempotencyKey)
			if err != nil {
				return fmt.Errorf("enqueueing %s on %s: reading the command its idempotency key names: %w", p.Kind, p.NodeID, err)
			}
			out[row.item] = duplicateOf(d, p)
			continue
		}
		out[row.item] = EnqueueOutcome{Command: stored(row.cmd, row.m, p, row.wire, row.sig, row.cert)}
	}
	return nil
}
