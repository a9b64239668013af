package queue

import (
	"encoding/json"
	"fmt"

	"github.com/better-compute/commands/sdk/kind"
	"github.com/jackc/pgx/v5"
)

// commandColumns is the select list every query that returns commands uses,
// in scanCommand's order. The prefix is the table alias.
func commandColumns(alias string) string {
	a := alias + "."
	return a + "id, " + a + "tenant_id, " + a + "node_id, " + a + "seq, " + a + "kind, " + a + "lane, " +
		a + "payload, coalesce(" + a + "idempotency_key, ''), " + a + "state, " + a + "reason, " +
		a + "not_after, " + a + "not_before, " + a + "min_generation, " +
		a + "retry_safe, " + a + "destructive, " + a + "self_terminating, " + a + "attested, " +
		a + "batch_id, " + a + "bundle_key, " + a + "cancel_requested_at, " + a + "progress, " +
		a + "result, " + a + "result_sha256, " + a + "node_sig, " + a + "rebooted, " + a + "attempts, " +
		a + "dispatched_epoch, " + a + "next_attempt_at, " +
		a + "created_at, " + a + "updated_at, " + a + "settled_at, " +
		a + "command_bytes, " + a + "signature, " + a + "worker_cert, " + a + "message, " + a + "result_bytes, " + a + "waiting_reason, " + a + "waiting_message, " + a + "kind_version, " + a + "awaiting_approval, " + a + "trace_parent, " +
		a + "requester, " + a + "requested_via, " + a + "waiting_detail"
}

// scanCommand reads commandColumns plus any extra destinations after them.
func scanCommand(row pgx.Row, extra ...any) (Command, error) {
	var c Command
	if err := scanCommandInto(row, &c, extra...); err != nil {
		return Command{}, err
	}
	return c, nil
}

// scanCommandInto reads commandColumns into *c, plus any extra
// destinations after them. A caller filling a slice scans straight into
// its element: a fan-out's gateway reads tens of thousands of rows, and a
// Command of its own per row (and the copy of it) was a tenth of the
// gateway's CPU. A caller reading many rows scans with one commandScanner.
func scanCommandInto(row pgx.Row, c *Command, extra ...any) error {
	var s commandScanner
	return s.scan(row, c, extra...)
}

// commandScanner reads rows of commandColumns, reusing its list of
// destinations and its holders for the columns that need converting from
// one row to the next: per row, that list (43 interface values) and those
// holders were six allocations, half of the gateway's garbage in a
// fan-out to 10,000 nodes. The byte slices pgx hands back are its own
// copies, so nothing of one row is visible in the next.
type commandScanner struct {
	dest               []any
	lane, state        string
	payload, prog, res []byte
	detail             []byte
}

func (s *commandScanner) scan(row pgx.Row, c *Command, extra ...any) error {
	dest := append(s.dest[:0],
		&c.ID, &c.TenantID, &c.NodeID, &c.Seq, &c.Kind, &s.lane,
		&s.payload, &c.IdempotencyKey, &s.state, &c.Reason,
		&c.NotAfter, &c.NotBefore, &c.MinGeneration,
		&c.Flags.RetrySafe, &c.Flags.Destructive, &c.Flags.SelfTerminating, &c.Flags.Attested,
		&c.BatchID, &c.BundleKey, &c.CancelRequestedAt, &s.prog,
		&s.res, &c.ResultSHA256, &c.NodeSig, &c.Rebooted, &c.Attempts,
		&c.DispatchedEpoch, &c.NextAttemptAt,
		&c.CreatedAt, &c.UpdatedAt, &c.SettledAt,
		&c.CommandBytes, &c.Signature, &c.WorkerCert, &c.Message, &c.ResultBytes, &c.WaitingReason, &c.WaitingMessage, &c.KindVersion, &c.AwaitingApproval, &c.TraceParent,
		&c.Requester, &c.RequestedVia, &s.detail,
	)
	dest = append(dest, extra...)
	s.dest = dest
	err := row.Scan(dest...)
	// The list keeps no pointer into c past this row: the next row's
	// Command (or none) may be elsewhere.
	clear(dest)
	if err != nil {
		return err
	}
	c.Lane = kind.Lane(s.lane)
	c.State = State(s.state)
	c.Payload = json.RawMessage(s.payload)
	c.Progress, c.Result = nil, nil
	if s.prog != nil {
		c.Progress = json.RawMessage(s.prog)
	}
	if s.res != nil {
		c.Result = json.RawMessage(s.res)
	}
	c.Blocked = nil
	if s.detail != nil {
		var b Blocked
		if err := json.Unmarshal(s.detail, &b); err == nil {
			c.Blocked = &b
		}
	}
	return nil
}

func scanCommands(rows pgx.Rows) ([]Command, error) {
	return scanCommandsSized(rows, 0)
}

// scanCommandsSized is scanCommands with room for hint rows made at once:
// a read of hundreds of nodes' open commands grew its slice of whole rows
// a doubling at a time.
func scanCommandsSized(rows pgx.Rows, hint int) ([]Command, error) {
	defer rows.Close()
	var (
		out []Command // nil when no row came, as before hints
		sc  commandScanner
	)
	if hint > 0 {
		out = make([]Command, 0, hint)
	}
	for rows.Next() {
		out = append(out, Command{})
		if err := sc.scan(rows, &out[len(out)-1]); err != nil {
			return nil, fmt.Errorf("reading commands: %w", err)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("reading commands: %w", err)
	}
	return out, nil
}
