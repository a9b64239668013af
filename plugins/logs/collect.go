package logs

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/better-compute/commands/plugins/internal/gpu/xid"
	"github.com/better-compute/commands/sdk/kind"
)

// part is one file of the bundle, collected to disk.
type part struct {
	// Name is the path inside the archive.
	Name string
	// path is the collected file.
	path string
	// Size is what was collected; offset is the first byte kept.
	Size   int64
	offset int64
	// Logs are truncatable, oldest line first.
	Logs bool
	// Note says what went wrong collecting it, if anything.
	Note string
	// rawDropped is what was dropped while collecting (a flood over
	// MaxRawBytes); the file then starts mid-line, and minOff skips that
	// partial first line.
	rawDropped int64
	minOff     int64
}

func (p *part) kept() int64 { return p.Size - p.offset }

// collector gathers the sources into dir.
type collector struct {
	cfg   Config
	dir   string
	req   kind.Request
	since time.Time
}

func (c *collector) newPart(name string, logs bool) *part {
	return &part{Name: name, path: filepath.Join(c.dir, strings.ReplaceAll(name, "/", "_")), Logs: logs}
}

func (p *part) finishFile(note string) {
	if fi, err := os.Stat(p.path); err == nil {
		p.Size = fi.Size()
	} else if note == "" {
		note = err.Error()
	}
	p.Note = note
}

// journal runs journalctl for the window into a part, with args naming
// the unit or the priority.
func (c *collector) journal(ctx context.Context, name string, args ...string) *part {
	p := c.newPart(name, true)
	rot, err := newRotating(c.dir, filepath.Base(p.path)+".seg", c.cfg.MaxRawBytes)
	if err != nil {
		p.Note = err.Error()
		return p
	}
	full := append([]string{"--no-pager", "--quiet", "-o", "short-iso", "--since=@" + strconv.FormatInt(c.since.Unix(), 10)}, args...)
	runErr := runTo(ctx, c.cfg.ExecTimeout, rot, c.cfg.Journalctl, full...)
	dropped, err := rot.finish(p.path)
	p.rawDropped = dropped
	note := ""
	if runErr != nil {
		note = runErr.Error()
	}
	if err != nil {
		note = strings.TrimPrefix(note+"; ", "; ") + "assembling: " + err.Error()
	}
	p.finishFile(note)
	if p.rawDropped > 0 {
		if f, err := os.Open(p.path); err == nil {
			p.minOff, _ = lineStart(f, p.Size, p.Size, 1)
			p.offset = p.minOff
			f.Close()
		}
	}
	return p
}

// kmsg reads the kernel log into a part, one line per record, as dmesg
// prints it.
func (c *collector) kmsg() *part {
	p := c.newPart("kernel/kmsg.log", true)
	f, err := os.Create(p.path)
	if err != nil {
		p.Note = err.Error()
		return p
	}
	w := bufio.NewWriter(f)
	st, rerr := xid.ReadKmsg(c.cfg.KmsgPath, func(r xid.Record) {
		fmt.Fprintf(w, "[%12.6f] <%d> %s\n", r.Timestamp.Seconds(), r.Priority, r.Message)
	})
	note := ""
	if rerr != nil {
		note = rerr.Error()
	} else if st.Dropped > 0 {
		note = fmt.Sprintf("the kernel's ring overwrote records %d times before they were read", st.Dropped)
	}
	if err := w.Flush(); err != nil && note == "" {
		note = err.Error()
	}
	_ = f.Close()
	p.finishFile(note)
	return p
}

// writeJSON writes v as indented JSON into a part.
func (c *collector) writeJSON(name string, v any, note string) *part {
	p := c.newPart(name, false)
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		p.Note = err.Error()
		return p
	}
	if err := os.WriteFile(p.path, append(b, '\n'), 0o600); err != nil {
		p.Note = err.Error()
		return p
	}
	p.finishFile(note)
	return p
}

// host asks bcd for the inventory, the conditions and the journal.
func (c *collector) host(ctx context.Context) []*part {
	var parts []*part
	inv, at, err := c.req.Host.Inventory(ctx)
	doc := map[string]any{"inventory": inv}
	if !at.IsZero() {
		doc["collectedAt"] = at.UTC()
	}
	if inv == nil {
		doc["inventory"] = nil
	}
	parts = append(parts, c.writeJSON("gpu/inventory.json", doc, errNote(err)))

	conds, err := c.req.Host.Conditions(ctx)
	if conds == nil {
		conds = []kind.Condition{}
	}
	parts = append(parts, c.writeJSON("node/conditions.json", conds, errNote(err)))

	// bcd's journal records come newest first; the file is oldest first,
	// one JSON record a line, so truncation drops the oldest.
	p := c.newPart("bcd/journal.jsonl", true)
	recs, err := c.req.Host.Journal(ctx, JournalRecords)
	var b strings.Builder
	for i := len(recs) - 1; i >= 0; i-- {
		var buf bytes.Buffer
		if cerr := json.Compact(&buf, recs[i]); cerr != nil {
			continue
		}
		b.WriteString(buf.String())
		b.WriteByte('\n')
	}
	if werr := os.WriteFile(p.path, []byte(b.String()), 0o600); werr != nil && err == nil {
		err = werr
	}
	p.finishFile(errNote(err))
	return append(parts, p)
}

func errNote(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
