package logs

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/better-compute/commands/sdk/kind"
)

// Payload is logs.collect's payload. The control plane fills UploadURL,
// MaxBytes and SupportBundle; no credential travels in it.
type Payload struct {
	UploadURL     string   `json:"uploadUrl"`
	MaxBytes      int64    `json:"maxBytes"`
	SupportBundle bool     `json:"supportBundle,omitempty"`
	BundleKey     string   `json:"bundleKey,omitempty"`
	Since         string   `json:"since,omitempty"`
	Units         []string `json:"units,omitempty"`
}

// Result is logs.collect's result document.
type Result struct {
	// BundleKey echoes the payload's key when given.
	BundleKey string `json:"bundleKey,omitempty"`
	// SizeBytes and SHA256 (hex) describe the uploaded archive exactly; the
	// control plane checks the stored object against them.
	SizeBytes int64  `json:"sizeBytes"`
	SHA256    string `json:"sha256"`
	// Truncated says lines were dropped, oldest first, to fit MaxBytes.
	Truncated bool         `json:"truncated"`
	Window    string       `json:"window"`
	Files     []FileReport `json:"files"`
}

// Failure reasons logs.collect reports.
const (
	ReasonUploadRefused = "upload-refused"
	ReasonUploadFailed  = "upload-failed"
	ReasonTooLarge      = "bundle-too-large"
	ReasonBadPayload    = kind.ReasonInvalidPayload
)

// Handler collects and uploads a bundle under cfg. client nil means a
// client without a timeout of its own (the command's deadline bounds it).
func Handler(cfg Config, client *http.Client) kind.Handler {
	cfg = cfg.withDefaults()
	if client == nil {
		client = &http.Client{}
	}
	return kind.HandlerFunc(func(ctx context.Context, req kind.Request) (any, error) {
		return handle(ctx, cfg, client, req)
	})
}

func handle(ctx context.Context, cfg Config, client *http.Client, req kind.Request) (any, error) {
	var p Payload
	if err := req.Command.Decode(&p); err != nil {
		return nil, kind.Fail(ReasonBadPayload, "%v", err)
	}
	window := DefaultWindow
	if p.Since != "" {
		d, err := time.ParseDuration(p.Since)
		if err != nil || d <= 0 || d > MaxWindow {
			return nil, kind.Fail(ReasonBadPayload, "since %q: must be a duration above 0 and at most %s", p.Since, MaxWindow)
		}
		window = d
	}
	progress := req.Progress
	if progress == nil {
		progress = kind.ProgressFunc(func(int, string) {})
	}
	dir, err := os.MkdirTemp(cfg.TempDir, "bc-logs-")
	if err != nil {
		return nil, fmt.Errorf("making a work directory: %w", err)
	}
	defer os.RemoveAll(dir)

	c := &collector{cfg: cfg, dir: dir, req: req, since: cfg.Now().Add(-window)}
	var parts []*part
	units := append(append([]string(nil), cfg.Units...), p.Units...)
	seen := map[string]bool{}
	for i, u := range units {
		if seen[u] {
			continue
		}
		seen[u] = true
		progress.Report(5+25*i/len(units), "reading the journal of "+u)
		parts = append(parts, c.journal(ctx, "journal/"+u+".log", "-u", u))
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
	}
	progress.Report(30, "reading the journal's warnings")
	parts = append(parts, c.journal(ctx, "journal/warnings.log", "-p", "warning"))
	progress.Report(35, "reading the kernel log")
	parts = append(parts, c.kmsg())
	progress.Report(38, "asking bcd for the inventory, conditions and journal")
	parts = append(parts, c.host(ctx)...)
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}

	progress.Report(40, "packing the bundle")
	b, err := c.fit(filepath.Join(dir, "bundle.tar.gz"), parts, p.MaxBytes, window)
	if err != nil {
		if errors.Is(err, ErrTooLarge) {
			return nil, kind.Fail(ReasonTooLarge, "%v", err)
		}
		return nil, fmt.Errorf("packing the bundle: %w", err)
	}
	res := Result{BundleKey: p.BundleKey, SizeBytes: b.size, SHA256: b.sha256, Truncated: b.manifest.Truncated, Window: window.String(), Files: b.manifest.Files}
	if req.Logger != nil {
		req.Logger.Info("bundle packed", "bytes", b.size, "sha256", b.sha256, "truncated", b.manifest.Truncated)
	}

	progress.Report(50, fmt.Sprintf("uploading %d bytes", b.size))
	if err := upload(ctx, client, p.UploadURL, b.path, b.size, progress, 50, 100); err != nil {
		reason := ReasonUploadFailed
		if errors.Is(err, ErrUploadRefused) {
			reason = ReasonUploadRefused
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("uploading: %w", ctx.Err())
		}
		return nil, &kind.Failure{Reason: reason, Message: err.Error(), Result: res}
	}
	return res, nil
}
