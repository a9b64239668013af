// Package gpureset is the gpu.reset kind: reset GPUs with nvidia-smi once no
// allocation, passthrough or process uses them, and report per GPU whether
// the reset worked and whether a fresh query shows the GPU healthy. The
// provision module's remediation sends it (for RowRemapPending, once no
// allocation is live); commands.run does not accept it.
package gpureset

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

// Payload is gpu.reset's payload.
type Payload struct {
	// GPUs are the UUIDs of the GPUs to reset.
	GPUs []string `json:"gpus"`
}
