// Package manifest is gpu.reset's manifest: the one Go value that
// bc-kind-gpureset serves and the control plane's registry imports. It
// imports only sdk/kind, so that the registry (and bc-server) links none of
// the plugin's code: nvidia-smi, the /proc scan and the XID store stay in
// plugins/gpureset.
package manifest

import (
	"encoding/json"
	"time"

	"github.com/better-compute/commands/sdk/kind"
)

// KindName is the kind's name.
const KindName = "gpu.reset"

// Manifest is gpu.reset's manifest, served by bc-kind-gpureset and
// registered by the control plane.
//
// Lane: provision. A reset is part of getting GPUs ready for allocations,
// takes seconds to minutes (longer than a control-lane action should hold a
// slot, far shorter than bulk work) and must not queue behind a log upload or
// a long diagnostic in the bulk lane.
//
// Not retry-safe: a reset interrupted by a daemon crash may have left
// persistence mode off or the GPU half reset; its owner (the remediation)
// decides, after a fresh inventory, whether to send another. Destructive: it
// kills any context on the GPU, so under the quorum it needs an approved
// batch (the health reconciler creates one).
var Manifest = kind.Manifest{
	Kind:        KindName,
	Lane:        kind.LaneProvision,
	Timeout:     kind.Duration(10 * time.Minute),
	Roles:       []string{"node"},
	Flags:       kind.Flags{Destructive: true},
	APIRunnable: false,
	PayloadSchema: json.RawMessage(`{
  "type": "object",
  "properties": {
    "gpus": {
      "type": "array",
      "minItems": 1,
      "uniqueItems": true,
      "items": {"type": "string", "pattern": "^GPU-[0-9A-Za-z-]+$"},
      "description": "UUIDs of the physical GPUs to reset"
    }
  },
  "required": ["gpus"],
  "additionalProperties": false
}`),
	Version:     "0.1.0",
	Description: "Reset GPUs with nvidia-smi once nothing uses them; reports per GPU whether the reset worked and the GPU is healthy.",
}
