package queue

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/better-compute/commands/controlplane/internal/errcode"
)

// Get returns command commandID of node nodeID ("" accepts any node). An
// unknown command, or one of another node, is NOT_FOUND.
func (q *Queue) Get(ctx context.Context, db DBTX, nodeID, commandID string) (Command, error) {
	cmd, err := scanCommand(db.QueryRow(ctx, `SELECT `+commandColumns("c")+` FROM commands c
		WHERE c.id = $1 AND ($2 = '' OR c.node_id = $2)`, commandID, nodeID))
	if errors.Is(err, pgx.ErrNoRows) {
		return Command{}, commandNotFound(nodeID, commandID)
	}
	if err != nil {
		return Command{}, fmt.Errorf("reading command %s: %w", commandID, err)
	}
	return cmd, nil
}

// List returns one page of a node's commands, newest first by seq, filtered
// by state when p.State is set: p.Limit of them (default 100, capped at
// 200), and next, an opaque cursor for the following page ("" on the last).
// With p.TenantID set, a node of another tenant is NOT_FOUND; a deleted node
// still lists its history.
func (q *Queue) List(ctx context.Context, db DBTX, p ListParams) (items []Command, next string, err error) {
	if p.NodeID == "" {
		return nil, "", errcode.Newf(errcode.InvalidInput, "missing-field", map[string]string{"field": "nodeId"}, "nodeId is required")
	}
	if p.State != "" && !p.State.Valid() {
		return nil, "", errcode.Newf(errcode.InvalidInput, "invalid-state", map[string]string{"field": "state", "state": string(p.State)}, "state %q is not a command state", p.State)
	}
	limit, err := pageLimit(p.Limit)
	if err != nil {
		return nil, "", err
	}
	before, err := DecodeListCursor(p.Cursor)
	if err != nil {
		return nil, "", errcode.Newf(errcode.InvalidInput, "invalid-cursor", map[string]string{"field": "cursor"}, "%v", err)
	}
	if p.TenantID != "" {
		var ok bool
		if err := db.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM nodes WHERE id = $1 AND tenant_id = $2)`, p.NodeID, p.TenantID).Scan(&ok); err != nil {
			return nil, "", fmt.Errorf("listing commands of %s: %w", p.NodeID, err)
		}
		if !ok {
			return nil, "", nodeNotFound(p.NodeID)
		}
	}
	rows, err := db.Query(ctx, `SELECT `+commandColumns("c")+` FROM commands c
		WHERE c.node_id = $1 AND ($2 = '' OR c.state = $2) AND ($3 = 0 OR c.seq < $3)
		ORDER BY c.seq DESC LIMIT $4`, p.NodeID, string(p.State), before, limit+1)
	if err != nil {
		return nil, "", fmt.Errorf("listing commands of %s: %w", p.NodeID, err)
	}
	items, err = scanCommands(rows)
	if err != nil {
		return nil, "", err
	}
	if len(items) > limit {
		items = items[:limit]
		next = EncodeListCursor(items[limit-1].Seq)
	}
	return items, next, nil
}

// pageLimit is a list's page size: DefaultListLimit for 0, at most
// MaxListLimit; a negative one is INVALID_INPUT.
func pageLimit(limit int) (int, error) {
	switch {
	case limit < 0:
		return 0, errcode.Newf(errcode.InvalidInput, "invalid-limit", map[string]string{"field": "limit"}, "limit must not be negative")
	case limit == 0:
		return DefaultListLimit, nil
	}
	return min(limit, MaxListLimit), nil
}

// ListOpen returns a node's non-terminal commands in seq order, from the
// partial index: what the gateway replays when a node reconnects.
func (q *Queue) ListOpen(ctx context.Context, db DBTX, nodeID string) ([]Command, error) {
	rows, err := db.Query(ctx, `SELECT `+commandColumns("c")+` FROM commands c
		WHERE c.node_id = $1 AND c.state IN ('pending', 'dispatched', 'acked', 'running')
		ORDER BY c.seq`, nodeID)
	if err != nil {
		return nil, fmt.Errorf("listing open commands of %s: %w", nodeID, err)
	}
	return scanCommands(rows)
}

// ListOpenMany is ListOpen for many nodes in one statement: each node's
// non-terminal commands in seq order, keyed by node id (a node with none is
// absent). A gateway whose sessions all wake at once (a fan-out, the
// listener's reconnect, the idle poll of thousands of sessions) reads them
// in a few statements instead of one per session.
func (q *Queue) ListOpenMany(ctx context.Context, db BatchDBTX, nodeIDs []string) (map[string][]Command, error) {
	// A node named twice is read once: the statement reads once per name.
	if len(nodeIDs) > 1 {
		seen := make(map[string]bool, len(nodeIDs))
		unique := make([]string, 0, len(nodeIDs))
		for _, id := range nodeIDs {
			if !seen[id] {
				seen[id] = true
				unique = append(unique, id)
			}
		}
		nodeIDs = unique
	}
	// On its generic plan, built with indexed reads (genericPlans), in one
	// round trip. Outside a transaction the batch is one implicit
	// transaction, whose end ends the settings; inside the caller's, they
	// are turned off after the read.
	var cmds []Command
	batch := &pgx.Batch{}
	genericPlans(batch, true)
	batch.Queue(listOpenManySQL, nodeIDs).Query(func(rows pgx.Rows) error {
		var err error
		// Room for one row a node: a fan-out's reads find about that (the
		// command that woke each node), a reconnect's mostly none.
		cmds, err = scanCommandsSized(rows, len(nodeIDs))
		return err
	})
	if _, inTx := db.(pgx.Tx); inTx {
		genericPlans(batch, false)
	}
	err := db.SendBatch(ctx, batch).Close()
	if err != nil {
		return nil, fmt.Errorf("listing open commands of %d nodes: %w", len(nodeIDs), err)
	}
	// The rows come grouped by node: each node's commands are a window of
	// cmds, capped so that an append to one cannot overwrite the next
	// node's, rather than a copy of each row in a slice of its own.
	out := make(map[string][]Command, len(nodeIDs))
	for start := 0; start < len(cmds); {
		end := start + 1
		for end < len(cmds) && cmds[end].NodeID == cmds[start].NodeID {
			end++
		}
		out[cmds[start].NodeID] = cmds[start:end:end]
		start = end
	}
	return out, nil
}

// listOpenManySQL reads the open commands of each node it is given through
// that node's entries of commands_open_by_node, and nothing else: the
// subquery per node (LATERAL, which its ORDER BY keeps PostgreSQL from
// merging into a join) can only be run once for each node id, and a
// node's open commands are found by key. Given the ids as one array
// instead, PostgreSQL may read every open command and test each against
// every id (with the open indexes' statistics taken between fan-outs,
// when they are nearly empty, it did: 170 ms a read of 512 nodes during a
// fan-out to 10,000; TestListOpenManyReadsOnlyTheNodesItNames). A node id
// given twice would be read twice: ListOpenMany names each once.
var listOpenManySQL = `SELECT ` + commandColumns("c") + ` FROM unnest($1::text[]) WITH ORDINALITY AS n(id, ord),
  LATERAL (SELECT * FROM commands c WHERE c.node_id = n.id AND c.state IN ('pending', 'dispatched', 'acked', 'running') ORDER BY c.seq) c
ORDER BY n.ord, c.seq`

// BatchDBTX is a DBTX that can also send a batch: a pool, a connection, a
// transaction.
type BatchDBTX interface {
	DBTX
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// NodesWithOpen returns which of nodeIDs have a non-terminal command, in
// one read of the open-commands index: the gateway's sweep of its idle
// sessions (a lost wake-up) costs one statement for thousands of sessions
// instead of a read per session.
func (q *Queue) NodesWithOpen(ctx context.Context, db DBTX, nodeIDs []string) ([]string, error) {
	rows, err := db.Query(ctx, `SELECT DISTINCT c.node_id FROM commands c
		WHERE c.node_id = ANY($1) AND c.state IN ('pending', 'dispatched', 'acked', 'running')`, nodeIDs)
	if err != nil {
		return nil, fmt.Errorf("finding which of %d nodes have open commands: %w", len(nodeIDs), err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("finding which of %d nodes have open commands: %w", len(nodeIDs), err)
	}
	return ids, nil
}

// CommandRef names a command on its node.
type CommandRef struct{ NodeID, CommandID string }

// inFlightSQL reads which of the named commands are in flight, by primary
// key: unnest pairs each command id with its node.
const inFlightSQL = `SELECT c.id FROM unnest($1::text[], $2::text[]) AS r(node_id, id)
	JOIN commands c ON c.id = r.id AND c.node_id = r.node_id
	WHERE c.state IN ('dispatched', 'acked', 'running')`

// InFlight returns which of refs are in flight, by command id: sent to
// their node (dispatched, acked or running) and not settled. A command
// that is pending or terminal, an unknown one and one of another node than
// its ref names are not. One statement for the whole list, so that a
// module's pass over the commands it waits on (the rollout module's
// upgrades past their rejoin window) reads their states through the queue
// rather than with SQL of its own against the commands table.
func (q *Queue) InFlight(ctx context.Context, db DBTX, refs []CommandRef) (map[string]bool, error) {
	out := map[string]bool{}
	if len(refs) == 0 {
		return out, nil
	}
	nodeIDs, commandIDs := make([]string, len(refs)), make([]string, len(refs))
	for i, r := range refs {
		nodeIDs[i], commandIDs[i] = r.NodeID, r.CommandID
	}
	rows, err := db.Query(ctx, inFlightSQL, nodeIDs, commandIDs)
	if err != nil {
		return nil, fmt.Errorf("reading which of %d commands are in flight: %w", len(refs), err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("reading which of %d commands are in flight: %w", len(refs), err)
	}
	for _, id := range ids {
		out[id] = true
	}
	return out, nil
}

const listCursorPrefix = "seq:"

// EncodeListCursor makes the opaque cursor of a page that continues below seq.
func EncodeListCursor(seq int64) string {
	return base64.RawURLEncoding.EncodeToString([]byte(listCursorPrefix + strconv.FormatInt(seq, 10)))
}

// DecodeListCursor reads a cursor made by EncodeListCursor; "" is 0, the
// first page.
func DecodeListCursor(c string) (int64, error) {
	if c == "" {
		return 0, nil
	}
	b, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil {
		return 0, fmt.Errorf("malformed cursor %q", c)
	}
	s, ok := strings.CutPrefix(string(b), listCursorPrefix)
	if !ok {
		return 0, fmt.Errorf("malformed cursor %q", c)
	}
	seq, err := strconv.ParseInt(s, 10, 64)
	if err != nil || seq < 1 {
		return 0, fmt.Errorf("malformed cursor %q", c)
	}
	return seq, nil
}
