package queue

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/better-compute/commands/controlplane/internal/errcode"
	"github.com/better-compute/commands/controlplane/internal/pgtx"
)

// transitionSetSQL is transitionSQL's guarded UPDATE for many transitions
// at once: it joins the transitions (unnest, one row each, numbered by ord)
// instead of taking one as parameters, and each comes back as its
// updated row with changed true, else its current row with changed false,
// else nothing (not found). One statement then stores hundreds of nodes'
// reports: PostgreSQL's per-statement work (parse, plan, executor start, the
// outbox trigger and its NOTIFY) is paid once for all of them, which is what
// a fan-out to 10,000 nodes needs (BenchmarkSessions). The ids are also an
// index condition on commands (c.id = ANY), and the rows it left unchanged
// are found by a hashed NOT IN, not by comparing every row with every
// updated one (TestTransitionSetReadsOnlyTheCommandsItNames). Every guard of
// transitionCTE holds row by row; the same command twice in one statement
// would be updated once, so TransitionSet never sends that.
var transitionSetSQL = `
WITH t AS (
  SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::bytea[], $6::bytea[], $7::bool[],
    $8::bigint[], $9::text[], $10::text[], $11::text[], $12::bytea[], $13::text[])
    WITH ORDINALITY AS t(id, to_state, reason, result, result_sha256, node_sig, rebooted, epoch, progress, node_id, message, result_bytes, kind_version, ord)
), u AS (
  UPDATE commands c SET
    state = t.to_state,
    reason = CASE WHEN t.reason <> '' THEN t.reason ELSE c.reason END,
    message = CASE WHEN t.message <> '' THEN t.message
      WHEN bc_state_terminal(t.to_state) AND c.message = '' AND c.waiting_message <> '' THEN 'it waited: ' || c.waiting_message
      ELSE c.message END,
    waiting_reason = CASE WHEN bc_state_terminal(t.to_state) THEN c.waiting_reason ELSE '' END,
    waiting_message = CASE WHEN bc_state_terminal(t.to_state) THEN c.waiting_message ELSE '' END,
    waiting_detail = CASE WHEN bc_state_terminal(t.to_state) THEN c.waiting_detail END,
    kind_version = CASE WHEN t.to_state = 'dispatched' AND t.kind_version <> '' THEN t.kind_version ELSE c.kind_version END,
    result_bytes = coalesce(t.result_bytes, c.result_bytes),
    result = coalesce(t.result::jsonb, c.result),
    result_sha256 = coalesce(t.result_sha256, c.result_sha256),
    node_sig = coalesce(t.node_sig, c.node_sig),
    rebooted = c.rebooted OR t.rebooted,
    progress = coalesce(t.progress::jsonb, c.progress),
    settled_at = CASE WHEN bc_state_terminal(t.to_state) THEN now() END,
    dispatched_epoch = CASE WHEN t.to_state = 'dispatched' THEN t.epoch ELSE c.dispatched_epoch END,
    attempts = CASE WHEN t.to_state = 'dispatched' THEN c.attempts + 1 ELSE c.attempts END,
    next_attempt_at = NULL,
    updated_at = now()
  FROM t
  WHERE c.id = ANY($1::text[]) AND c.id = t.id AND (t.node_id = '' OR c.node_id = t.node_id)
    AND bc_state_rank(c.state) < bc_state_rank(t.to_state)
    AND (t.epoch = 0 OR EXISTS (SELECT 1 FROM nodes n WHERE n.id = c.node_id AND n.session_epoch = t.epoch))
  RETURNING ` + commandColumns("c") + `, t.ord
), ev AS (` + settledEventSQL + ` WHERE bc_state_terminal(state))
SELECT *, true FROM u
UNION ALL
SELECT ` + commandColumns("c") + `, t.ord, false FROM t JOIN commands c ON c.id = t.id AND (t.node_id = '' OR c.node_id = t.node_id)
WHERE c.id = ANY($1::text[]) AND t.ord NOT IN (SELECT ord FROM u)`

// TransitionSet applies many state reports in tx, each with the semantics
// of Transition (a guarded UPDATE that lands only when its state ranks
// above the current one and, with an epoch, while that session is the
// node's; command.settled published exactly once), in as few statements as
// it can: one for all of them unless a command appears more than once, in
// which case its later reports go in later statements, in order. out[i] is
// ts[i]'s outcome (Found false for a command that is not there, or not
// ts[i].NodeID's). An invalid target state fails the whole call before
// anything is sent. With a settle hook installed it is told, in tx, of
// every command the call settled.
func (q *Queue) TransitionSet(ctx context.Context, tx pgx.Tx, ts []Transition) ([]TransitionResult, error) {
	for _, t := range ts {
		if !t.To.Valid() || t.To == Pending {
			return nil, errcode.Newf(errcode.InvalidInput, "invalid-state", map[string]string{"state": string(t.To)}, "cannot transition to state %q", t.To)
		}
	}
	out := make([]TransitionResult, len(ts))
	// Read once: the rounds and the call after them agree on whether there
	// is a hook even if one is installed meanwhile.
	hook := q.hook()
	var settled []Command
	// The k-th report of a command goes in statement k, so that no
	// statement names a command twice and reports land in order.
	rs := rounds(len(ts), func(i int) string { return ts[i].CommandID })
	for k, round := range rs {
		// The last statement may carry the group's COMMIT (pgtx.SendFinal)
		// unless a settle hook may have statements to add after it: for
		// what an earlier statement settled, or what this one may.
		final := k == len(rs)-1 && (hook == nil || (len(settled) == 0 && !anyTerminal(ts, round)))
		s, err := q.transitionRound(ctx, tx, ts, round, out, final, hook != nil)
		if err != nil {
			return nil, err
		}
		settled = append(settled, s...)
	}
	if hook != nil && len(settled) > 0 {
		if err := hook(ctx, tx, settled); err != nil {
			return nil, fmt.Errorf("recording what settling %d command(s) wakes: %w", len(settled), err)
		}
	}
	return out, nil
}

// anyTerminal reports whether a transition of round targets a terminal
// state: one that may settle its command.
func anyTerminal(ts []Transition, round []int) bool {
	for _, i := range round {
		if ts[i].To.Terminal() {
			return true
		}
	}
	return false
}

// transitionRound sends the transitions ts[round...] (no command twice) in
// one statement, fills their out entries and, when hooked (a settle hook
// will be told), returns what it settled: otherwise nothing reads it, and
// copying whole rows into a slice for nobody cost a fan-out's gateway a
// slice of them per group. The
// statement runs on its generic plan, built with indexed reads, and those
// settings are turned on just before it and off just after, in the same
// round trip (genericPlans): no other statement of the caller's
// transaction runs with them, even after an error here. A group's
// statement was planned afresh each time, which cost PostgreSQL more than
// running it (pg_stat_statements over BenchmarkSessions: 1.4 s of planning
// for 953 groups); its generic plan reads by key as its custom plans do
// (TestTransitionSetReadsOnlyTheCommandsItNames). With
// final, the batch goes through pgtx.SendFinal: with the transaction's
// COMMIT when ctx carries its Final.
func (q *Queue) transitionRound(ctx context.Context, tx pgx.Tx, ts []Transition, round []int, out []TransitionResult, final, hooked bool) ([]Command, error) {
	n := len(round)
	var (
		ids, states, reasons, progress, nodes, messages, versions = make([]string, n), make([]string, n), make([]string, n), make([]*string, n), make([]string, n), make([]string, n), make([]string, n)
		results                                                   = make([]*string, n)
		sums, sigs, resultBytes                                   = make([][]byte, n), make([][]byte, n), make([][]byte, n)
		rebooted                                                  = make([]bool, n)
		epochs                                                    = make([]int64, n)
	)
	for j, i := range round {
		t := ts[i]
		ids[j], states[j], reasons[j], nodes[j], messages[j], versions[j] = t.CommandID, string(t.To), t.Reason, t.NodeID, t.Message, t.KindVersion
		if t.Result != nil {
			r := string(t.Result)
			results[j] = &r
		}
		if t.Progress != nil {
			p := string(t.Progress)
			progress[j] = &p
		}
		sums[j], sigs[j], resultBytes[j], rebooted[j], epochs[j] = t.ResultSHA256, t.NodeSig, t.ResultBytes, t.Rebooted, t.Epoch
	}
	var settled []Command
	// Sent as a batch of one with its rows read by a callback: a
	// transaction whose BEGIN waits for its first statement (controlplane/
	// pgtx) sends both in one round trip.
	b := &pgx.Batch{}
	genericPlans(b, true)
	b.Queue(transitionSetSQL, ids, states, reasons, results, sums, sigs, rebooted, epochs, progress, nodes, messages, resultBytes, versions).Query(func(rows pgx.Rows) error {
		settled = settled[:0]
		var (
			cmd     Command // one for every row, each copied out
			ord     int64
			changed bool
			sc      commandScanner
		)
		for rows.Next() {
			// Zeroed first: no slice of the last row's is reused.
			cmd = Command{}
			if err := sc.scan(rows, &cmd, &ord, &changed); err != nil {
				return err
			}
			if ord < 1 || int(ord) > n {
				return fmt.Errorf("the database answered for transition %d", ord)
			}
			i := round[ord-1]
			out[i] = TransitionResult{Command: cmd, Changed: changed, Found: true}
			if changed && cmd.State.Terminal() {
				if hooked {
					settled = append(settled, cmd)
				}
				if q.logger.IsDebug() {
					q.logger.Debug("command settled", "command_id", cmd.ID, "node_id", cmd.NodeID, "state", cmd.State, "reason", cmd.Reason)
				}
			}
		}
		return rows.Err()
	})
	genericPlans(b, false)
	send := func() error { return tx.SendBatch(ctx, b).Close() }
	if final {
		send = func() error { return pgtx.SendFinal(ctx, tx, b) }
	}
	if err := send(); err != nil {
		return nil, fmt.Errorf("transitioning %d commands: %w", n, err)
	}
	// An entry the database did not answer stays zero: not found.
	return settled, nil
}

// rounds splits the indexes 0..n-1 into rounds in which no key appears
// twice, keeping order: the k-th index with a key goes in round k. An
// empty key never conflicts. A set statement over arrays would otherwise
// join one row twice (TransitionSet) or collide with itself (EnqueueSet).
func rounds(n int, key func(i int) string) [][]int {
	var out [][]int
	taken := map[string]int{} // key -> rounds it is in so far
	for i := range n {
		k := key(i)
		r := 0
		if k != "" {
			r = taken[k]
			taken[k]++
		}
		for len(out) <= r {
			out = append(out, nil)
		}
		out[r] = append(out[r], i)
	}
	return out
}
