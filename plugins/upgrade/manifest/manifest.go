// Package manifest is daemon.upgrade's manifest: the one Go value that
// bc-kind-upgrade serves and the control plane's registry imports. It
// imports only sdk/kind.
package manifest

import (
	"encoding/json"
	"time"

	"github.com/better-compute/commands/sdk/kind"
)

// KindName is the kind this package serves.
const KindName = "daemon.upgrade"

// Manifest is daemon.upgrade's manifest.
//
// The bulk lane, because it downloads a package of up to 2 GiB and must not
// hold a control worker. Self-terminating: the plugin's success only says
// the upgrade was handed to bcd-upgrader, and the daemon that the restart
// brings up settles it (the new version once it rejoined, the old one after
// a rollback), so it is never re-dispatched after the handoff. Not
// retry-safe: a bcd that stopped before the handoff fails it with
// interrupted, and the rollout decides. The timeout covers the download
// and the rejoin window. Not in commands.run's allowlist: the rollout
// module converges pools to their desired daemon version with it.
var Manifest = kind.Manifest{
	Kind:    KindName,
	Lane:    kind.LaneBulk,
	Timeout: kind.Duration(45 * time.Minute),
	Roles:   []string{"node"},
	Flags: kind.Flags{
		SelfTerminating: true,
	},
	PayloadSchema: json.RawMessage(`{
  "type": "object",
  "additionalProperties": false,
  "required": ["targetVersion", "package", "release"],
  "properties": {
    "targetVersion": {"type": "string", "minLength": 1, "maxLength": 128, "pattern": "^[0-9A-Za-z][0-9A-Za-z._+-]*$"},
    "package": {
      "type": "object",
      "additionalProperties": false,
      "required": ["url", "size", "sha256"],
      "properties": {
        "url": {"type": "string", "pattern": "^(https?|file)://"},
        "size": {"type": "integer", "minimum": 1, "maximum": 2147483648},
        "sha256": {"type": "string", "pattern": "^[0-9a-f]{64}$"}
      }
    },
    "release": {"type": "string", "minLength": 1, "description": "base64 of the release statement signed by a release key of the trust bundle"},
    "allowDowngrade": {"type": "boolean"},
    "retrySkipped": {"type": "boolean"},
    "rejoinWindowSeconds": {"type": "integer", "minimum": 10, "maximum": 1800}
  }
}`),
	Version:     "1.0.0",
	Description: "Upgrade bcd to a signed release: verify, stage, self-check, hand off to bcd-upgrader, which swaps, restarts and rolls back if the new daemon does not rejoin",
}
