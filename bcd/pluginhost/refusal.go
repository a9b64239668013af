package pluginhost

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/better-compute/commands/sdk/wire"
)

// Refusal reasons: stable words the node reports in Hello, so that a
// command for a kind of a refused plugin says in the API what to fix.
const (
	RefusedPinMismatch     = "pin-mismatch"
	RefusedUntrusted       = "untrusted"
	RefusedInvalidManifest = "invalid-manifest"
	RefusedKindConflict    = "kind-conflict"
	RefusedStartFailed     = "start-failed"
	refusedDirUnreadable   = "plugin-dir"
	refusedPinnedNotFound  = "pinned-not-found"
)

// classify fills in r's Reason, and for a pin that differs from the file,
// the pinned and the found SHA-256, which the operator compares before
// updating the pin.
func classify(r Refusal, dir string, pins map[string]string) Refusal {
	msg := ""
	if r.Err != nil {
		msg = r.Err.Error()
	}
	switch {
	case r.Plugin == "":
		r.Reason = refusedDirUnreadable
	case errors.Is(r.Err, wire.ErrChecksum):
		r.Reason = RefusedPinMismatch
	case errors.Is(r.Err, errBadManifests) || strings.Contains(msg, "invalid manifest"):
		r.Reason = RefusedInvalidManifest
	case strings.Contains(msg, "is claimed by both"):
		r.Reason = RefusedKindConflict
	case strings.Contains(msg, "writable by") || strings.Contains(msg, "symlink") || strings.Contains(msg, "not a regular file") || strings.Contains(msg, "owner"):
		r.Reason = RefusedUntrusted
	default:
		r.Reason = RefusedStartFailed
	}
	if r.Reason == RefusedPinMismatch {
		r.PinnedSHA256 = strings.ToLower(pins[r.Plugin])
		r.FoundSHA256 = fileSHA256(filepath.Join(dir, r.Plugin))
	}
	return r
}

// fileSHA256 is the file's SHA-256 in hex, "" when it cannot be read.
func fileSHA256(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return ""
	}
	return hex.EncodeToString(h.Sum(nil))
}
