// Package manifest is node.reboot's manifest: the one Go value that
// bc-kind-reboot serves and the control plane's registry imports. It imports
// only sdk/kind, so that the registry (and bc-server) links none of the
// plugin's code: godbus and go-systemd stay in plugins/reboot.
package manifest

import (
	"encoding/json"
	"time"

	"github.com/better-compute/commands/sdk/kind"
)

// KindName is the kind this package serves.
const KindName = "node.reboot"

// Manifest is node.reboot's manifest, served by bc-kind-reboot and registered
// by the control plane.
//
// The control lane, because a reboot is a short call that must not queue
// behind bulk work such as a support bundle, and operators reach for it when
// a node misbehaves. Destructive, so with approver keys it needs an approved
// batch. Self-terminating, so bcd journals it with the boot id before the
// call and a new boot id completes it. Not retry-safe: after a daemon crash
// it must fail with interrupted rather than reboot a second time. The
// timeout covers the rejoin window: the control plane fails the command only
// when the node has not come back within it.
var Manifest = kind.Manifest{
	Kind:    KindName,
	Lane:    kind.LaneControl,
	Timeout: kind.Duration(15 * time.Minute),
	Roles:   []string{"node"},
	Flags: kind.Flags{
		Destructive:     true,
		SelfTerminating: true,
	},
	APIRunnable: true,
	PayloadSchema: json.RawMessage(`{
  "type": "object",
  "additionalProperties": false,
  "properties": {}
}`),
	Version:     "1.0.0",
	Description: "Reboot the node through logind (systemd's reboot.target without logind); a new boot id completes it",
}
