// Package manifest is site.httpProxy's manifest: the Go value that
// bc-kind-siteproxy serves and the control plane's metal module registers.
package manifest

import (
	"encoding/json"
	"time"

	"github.com/better-compute/commands/sdk/kind"
)

// KindName is the kind's name.
const KindName = "site.httpProxy"

// MaxBytes bounds the response a proxied request may return; DefaultBytes
// is the cap when the payload names none.
const (
	MaxBytes     = 16 << 20
	DefaultBytes = 1 << 20
)

// Manifest is site.httpProxy's manifest: one HTTP request to a BMC named by
// id in the site inventory, the break-glass path beside the typed bmc.*
// kinds.
//
// Destructive: an allowed POST or PATCH can power a machine off or change
// its firmware settings, so under the quorum it needs an approved batch.
// Not retry-safe: a request that changed something must not be sent twice.
// Role site: only a site agent holds the inventory and reaches the BMCs.
var Manifest = kind.Manifest{
	Kind:        KindName,
	Lane:        kind.LaneControl,
	Timeout:     kind.Duration(6 * time.Minute),
	Roles:       []string{"site"},
	Flags:       kind.Flags{Destructive: true},
	APIRunnable: true,
	PayloadSchema: json.RawMessage(`{
  "type": "object",
  "properties": {
    "bmc": {"type": "string", "pattern": "^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$", "description": "the BMC's id in the site inventory"},
    "method": {"enum": ["GET", "HEAD", "POST", "PATCH", "PUT", "DELETE"]},
    "path": {"type": "string", "pattern": "^/[^/]", "maxLength": 2048, "description": "an absolute path on the BMC, such as /redfish/v1/Systems; the inventory's proxy.allow must allow it"},
    "body": {"type": "string", "maxLength": 1048576, "description": "the request body (JSON text)"},
    "headers": {
      "type": "object",
      "propertyNames": {"enum": ["Accept", "Content-Type", "If-Match", "If-None-Match", "OData-Version"]},
      "additionalProperties": {"type": "string", "maxLength": 1024},
      "description": "request headers; only these five may be set (the agent sets Authorization itself)"
    },
    "maxBytes": {"type": "integer", "minimum": 1, "maximum": 16777216, "description": "the response body cap (1 MiB by default)"},
    "timeoutSeconds": {"type": "integer", "minimum": 1, "maximum": 300, "description": "the request's time cap (30 by default)"}
  },
  "required": ["bmc", "method", "path"],
  "additionalProperties": false
}`),
	Version:     "0.1.0",
	Description: "Break-glass HTTP request to a BMC named in the site inventory, at its pinned address, within the inventory's allow-list; the agent adds the credential and returns the response with its SHA-256.",
}
