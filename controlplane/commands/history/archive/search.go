package archive

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"time"
)

// Query picks archived commands. Empty fields match everything.
type Query struct {
	// Tenant is whose archive to read ("" for the fleet's).
	Tenant string
	// ID, Node, Kind and Requester match the command's id, node_id, kind
	// and requester exactly.
	ID, Node, Kind, Requester string
	// Since and Until bound the hours read (by the hour an object holds;
	// zero: unbounded).
	Since, Until time.Time
	// Limit bounds the commands returned (0: no bound).
	Limit int
}

// Found is one archived command with its archived events.
type Found struct {
	// Command is the command's row (every column, by name).
	Command json.RawMessage `json:"command"`
	// Events are the outbox events about it, oldest first.
	Events []json.RawMessage `json:"events"`
	// Object is the archive object it was found in.
	Object string `json:"object"`
}

// CommandRow is the part of an archived command a listing shows.
type CommandRow struct {
	ID           string     `json:"id"`
	TenantID     string     `json:"tenant_id"`
	NodeID       string     `json:"node_id"`
	Kind         string     `json:"kind"`
	State        string     `json:"state"`
	Reason       string     `json:"reason"`
	Message      string     `json:"message"`
	Requester    string     `json:"requester"`
	RequestedVia string     `json:"requested_via"`
	CreatedAt    time.Time  `json:"created_at"`
	SettledAt    *time.Time `json:"settled_at"`
}

// eventRow is the part of an event a search matches on.
type eventRow struct {
	ID      int64 `json:"id"`
	Payload struct {
		CommandID string `json:"commandId"`
	} `json:"payload"`
}

// Objects are the manifest's entries within q's hours.
func (q Query) Objects(m Manifest) []ObjectEntry {
	var out []ObjectEntry
	for _, e := range m.Objects {
		if !q.Since.IsZero() && e.Hour.Add(time.Hour).Before(q.Since) {
			continue
		}
		if !q.Until.IsZero() && !e.Hour.Before(q.Until) {
			continue
		}
		out = append(out, e)
	}
	return out
}

func (q Query) match(c CommandRow) bool {
	return (q.ID == "" || c.ID == q.ID) && (q.Node == "" || c.NodeID == q.Node) &&
		(q.Kind == "" || c.Kind == q.Kind) && (q.Requester == "" || c.Requester == q.Requester)
}

// Search reads the tenant's objects within q's hours, each checked against
// its manifest's SHA-256, and returns the commands q matches (oldest
// settled first) with their events.
func Search(ctx context.Context, src Source, q Query) ([]Found, error) {
	m, err := ReadManifest(ctx, src, q.Tenant)
	if err != nil {
		return nil, err
	}
	var found []Found
	byID := map[string]int{}
	var events []eventRow
	var eventLines []json.RawMessage
	for _, e := range q.Objects(m) {
		lines, err := ReadObject(ctx, src, e)
		if err != nil {
			return nil, err
		}
		for _, l := range lines {
			var rec Record
			if err := json.Unmarshal(l, &rec); err != nil {
				return nil, fmt.Errorf("%w: %s: %w", ErrIntegrity, e.Key, err)
			}
			switch rec.Type {
			case TypeCommand:
				var c CommandRow
				if err := json.Unmarshal(rec.Row, &c); err != nil {
					return nil, fmt.Errorf("%w: %s: a command: %w", ErrIntegrity, e.Key, err)
				}
				if q.match(c) && (q.Limit <= 0 || len(found) < q.Limit) {
					byID[c.ID] = len(found)
					found = append(found, Found{Command: rec.Row, Object: e.Key})
				}
			case TypeEvent:
				var ev eventRow
				if err := json.Unmarshal(rec.Row, &ev); err != nil {
					return nil, fmt.Errorf("%w: %s: an event: %w", ErrIntegrity, e.Key, err)
				}
				if ev.Payload.CommandID != "" && (q.ID == "" || ev.Payload.CommandID == q.ID) {
					events = append(events, ev)
					eventLines = append(eventLines, rec.Row)
				}
			}
		}
	}
	order := make([]int, len(events))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool { return events[order[a]].ID < events[order[b]].ID })
	for _, i := range order {
		if j, ok := byID[events[i].Payload.CommandID]; ok {
			found[j].Events = append(found[j].Events, eventLines[i])
		}
	}
	return found, nil
}

// Export writes every record of the tenant's objects within q's hours to w,
// one JSON line each, after checking each object's SHA-256. It returns how
// many lines it wrote.
func Export(ctx context.Context, src Source, q Query, w io.Writer) (int, error) {
	m, err := ReadManifest(ctx, src, q.Tenant)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, e := range q.Objects(m) {
		lines, err := ReadObject(ctx, src, e)
		if err != nil {
			return n, err
		}
		for _, l := range lines {
			if _, err := w.Write(append(l, '\n')); err != nil {
				return n, fmt.Errorf("writing: %w", err)
			}
			n++
		}
	}
	return n, nil
}
