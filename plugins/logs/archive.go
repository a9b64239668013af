package logs

import (
	"archive/tar"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/better-compute/commands/plugins/logs/manifest"
)

// ErrTooLarge says that even with every log line dropped the bundle does not fit.
var ErrTooLarge = errors.New("bundle does not fit its byte cap")

// FileReport says what one file of the bundle holds.
type FileReport struct {
	Name string `json:"name"`
	// CollectedBytes is what was collected; KeptBytes what the bundle holds.
	CollectedBytes int64 `json:"collectedBytes"`
	KeptBytes      int64 `json:"keptBytes"`
	// DroppedBytes and DroppedLines were cut from the start (the oldest).
	DroppedBytes int64  `json:"droppedBytes,omitempty"`
	DroppedLines int64  `json:"droppedLines,omitempty"`
	Note         string `json:"note,omitempty"`
}

// BundleManifest is MANIFEST.json, the first file of every bundle.
type BundleManifest struct {
	Kind        string       `json:"kind"`
	CommandID   string       `json:"commandId,omitempty"`
	NodeID      string       `json:"nodeId,omitempty"`
	CollectedAt time.Time    `json:"collectedAt"`
	Since       time.Time    `json:"since"`
	Window      string       `json:"window"`
	MaxBytes    int64        `json:"maxBytes"`
	Truncated   bool         `json:"truncated"`
	Files       []FileReport `json:"files"`
}

func (c *collector) manifest(parts []*part, maxBytes int64, window time.Duration) (BundleManifest, error) {
	m := BundleManifest{
		Kind: manifest.KindName, CommandID: c.req.Command.ID, NodeID: c.req.Command.NodeID,
		CollectedAt: c.cfg.Now().UTC(), Since: c.since.UTC(), Window: window.String(), MaxBytes: maxBytes,
	}
	for _, p := range parts {
		fr := FileReport{Name: p.Name, CollectedBytes: p.Size + p.rawDropped, KeptBytes: p.kept(), DroppedBytes: p.offset + p.rawDropped, Note: p.Note}
		lines, err := countLines(p.path, p.offset)
		if err != nil {
			return m, fmt.Errorf("counting dropped lines of %s: %w", p.Name, err)
		}
		fr.DroppedLines = lines
		if fr.DroppedBytes > 0 {
			m.Truncated = true
		}
		m.Files = append(m.Files, fr)
	}
	return m, nil
}

func readme(m BundleManifest) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Support bundle of node %s, collected %s for command %s.\n", m.NodeID, m.CollectedAt.Format(time.RFC3339), m.CommandID)
	fmt.Fprintf(&b, "Window: the %s since %s. Byte cap: %d.\n\n", m.Window, m.Since.Format(time.RFC3339), m.MaxBytes)
	b.WriteString("journal/*.log      journald (journalctl -o short-iso), bcd.service (bcd and its plugins) and the requested units\n")
	b.WriteString("journal/warnings.log  every unit's messages at priority warning and above\n")
	b.WriteString("kernel/kmsg.log    the kernel log: [seconds since boot] <priority> message\n")
	b.WriteString("gpu/inventory.json the GPU inventory bcd last recorded\n")
	b.WriteString("node/conditions.json the node's conditions\n")
	b.WriteString("bcd/journal.jsonl  bcd's most recent command journal records, oldest first\n")
	b.WriteString("MANIFEST.json      what each file holds and what was dropped\n\n")
	if !m.Truncated {
		b.WriteString("Nothing was truncated.\n")
	} else {
		b.WriteString("TRUNCATED to fit the byte cap, oldest first: lines were dropped from the start of these files:\n")
		for _, f := range m.Files {
			if f.DroppedBytes > 0 {
				fmt.Fprintf(&b, "  %s: %d of %d bytes dropped (%d lines), %d kept\n", f.Name, f.DroppedBytes, f.CollectedBytes, f.DroppedLines, f.KeptBytes)
			}
		}
	}
	for _, f := range m.Files {
		if f.Note != "" {
			fmt.Fprintf(&b, "Note on %s: %s\n", f.Name, f.Note)
		}
	}
	return b.String()
}

// built is one archive on disk.
type built struct {
	path     string
	size     int64
	sha256   string
	manifest BundleManifest
}

// build writes the tar.gz of parts, each from its offset, to path.
func (c *collector) build(path string, parts []*part, maxBytes int64, window time.Duration) (built, error) {
	m, err := c.manifest(parts, maxBytes, window)
	if err != nil {
		return built{}, err
	}
	f, err := os.Create(path)
	if err != nil {
		return built{}, fmt.Errorf("creating the bundle: %w", err)
	}
	defer f.Close()
	h := sha256.New()
	cw := &countWriter{w: io.MultiWriter(f, h)}
	zw, err := gzip.NewWriterLevel(cw, gzip.DefaultCompression)
	if err != nil {
		return built{}, err
	}
	tw := tar.NewWriter(zw)
	mtime := m.CollectedAt
	add := func(name string, size int64, r io.Reader) error {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: size, ModTime: mtime, Typeflag: tar.TypeReg, Format: tar.FormatPAX}); err != nil {
			return err
		}
		_, err := io.CopyN(tw, r, size)
		return err
	}
	mj, _ := json.MarshalIndent(m, "", "  ")
	mj = append(mj, '\n')
	if err := add("MANIFEST.json", int64(len(mj)), strings.NewReader(string(mj))); err != nil {
		return built{}, fmt.Errorf("writing MANIFEST.json: %w", err)
	}
	rd := readme(m)
	if err := add("README.txt", int64(len(rd)), strings.NewReader(rd)); err != nil {
		return built{}, fmt.Errorf("writing README.txt: %w", err)
	}
	for _, p := range parts {
		src, err := os.Open(p.path)
		if err != nil {
			// A source that failed to collect still has its note in the manifest.
			continue
		}
		_, err = src.Seek(p.offset, io.SeekStart)
		if err == nil {
			err = add(p.Name, p.kept(), src)
		}
		src.Close()
		if err != nil {
			return built{}, fmt.Errorf("writing %s: %w", p.Name, err)
		}
	}
	if err := tw.Close(); err != nil {
		return built{}, err
	}
	if err := zw.Close(); err != nil {
		return built{}, err
	}
	if err := f.Sync(); err != nil {
		return built{}, err
	}
	return built{path: path, size: cw.n, sha256: hex.EncodeToString(h.Sum(nil)), manifest: m}, nil
}

// fit builds the bundle and, while it is over maxBytes, drops the oldest
// lines of the logs and builds again. Each log keeps its newest lines; a
// shared budget is water-filled among them, so a flooding source cannot
// crowd out the others. The budget shrinks by the measured ratio of the
// compressed size to the cap, a little more each round.
func (c *collector) fit(path string, parts []*part, maxBytes int64, window time.Duration) (built, error) {
	var logs []*part
	var budget int64
	for _, p := range parts {
		if p.Logs {
			logs = append(logs, p)
			budget += p.kept()
		}
	}
	// Logs rarely compress better than maxRatio: cut what surely cannot
	// fit before compressing at all, so a flood costs one pass, not many.
	first := budget
	if limit := maxBytes * maxRatio; budget > limit {
		first = limit
	}
	var b built
	margin := 0.97
	for round := 0; round <= 16; round++ {
		if round > 0 {
			if budget == 0 {
				return b, fmt.Errorf("%w: %d bytes without any log line, cap %d", ErrTooLarge, b.size, maxBytes)
			}
			budget = int64(float64(budget) * float64(maxBytes) / float64(b.size) * margin)
			margin *= 0.97
		} else {
			budget = first
		}
		sizes := make([]int64, len(logs))
		for i, p := range logs {
			sizes[i] = p.Size - p.minOff
		}
		keep := waterFill(sizes, budget)
		for i, p := range logs {
			f, err := os.Open(p.path)
			if err != nil {
				p.offset = p.Size
				continue
			}
			p.offset, err = lineStart(f, p.Size, keep[i], p.minOff)
			f.Close()
			if err != nil {
				return b, fmt.Errorf("truncating %s: %w", p.Name, err)
			}
		}
		var err error
		if b, err = c.build(path, parts, maxBytes, window); err != nil || b.size <= maxBytes {
			return b, err
		}
	}
	return b, fmt.Errorf("%w: still %d bytes after 16 rounds, cap %d", ErrTooLarge, b.size, maxBytes)
}

// maxRatio is the best compression ratio fit expects of logs.
const maxRatio = 24

type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}
