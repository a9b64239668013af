// Package manifest is logs.collect's manifest: the one Go value that
// bc-kind-logs serves and the control plane's registry imports. It imports
// only sdk/kind, so that the registry (and bc-server) links none of the
// plugin's code: journald, the bundle packer and the uploader stay in
// plugins/logs.
package manifest

import (
	"encoding/json"
	"time"

	"github.com/better-compute/commands/sdk/kind"
)

// KindName is the kind this package serves.
const KindName = "logs.collect"

// Manifest is logs.collect's manifest, served by bc-kind-logs and registered
// by the control plane.
//
// The bulk lane: a bundle reads a day of logs and uploads up to the cap, and
// must not hold up control work. Retry-safe: collecting again changes
// nothing on the node, and the upload is a PUT to the same key that
// overwrites, with the URL the command already carries (a retry of the same
// idempotency key presigns nothing new), so running twice after a crash
// leaves one complete bundle. Not destructive, not self-terminating.
var Manifest = kind.Manifest{
	Kind:    KindName,
	Lane:    kind.LaneBulk,
	Timeout: kind.Duration(30 * time.Minute),
	Roles:   []string{"node"},
	Flags: kind.Flags{
		RetrySafe: true,
	},
	APIRunnable: true,
	PayloadSchema: json.RawMessage(`{
  "type": "object",
  "additionalProperties": false,
  "required": ["uploadUrl", "maxBytes"],
  "properties": {
    "uploadUrl": {"type": "string", "pattern": "^https?://", "description": "presigned PUT URL; the control plane fills it"},
    "maxBytes": {"type": "integer", "minimum": 1024, "description": "byte cap of the bundle; the control plane fills it"},
    "supportBundle": {"type": "boolean", "description": "set by the control plane for support bundles"},
    "bundleKey": {"type": "string", "maxLength": 1024, "description": "the blob key, echoed in the result"},
    "since": {"type": "string", "pattern": "^([0-9]+(\\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$", "description": "the window, a Go duration such as 24h (default)"},
    "units": {
      "type": "array",
      "maxItems": 32,
      "items": {"type": "string", "pattern": "^[A-Za-z0-9@_][A-Za-z0-9@._:\\-]{0,255}$"},
      "description": "systemd units whose journal to add to bcd.service's"
    }
  }
}`),
	Version:     "1.0.0",
	Description: "Collect a support bundle (journald, kernel log, GPU inventory, conditions, bcd's journal) and upload it to a presigned URL",
}
