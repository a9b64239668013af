// Package manifest is diag.dcgm's manifest: the one Go value that
// bc-kind-dcgm serves and the control plane's registry imports. It imports
// only sdk/kind, so that the registry (and bc-server) links none of the
// plugin's code: dcgmi, nvidia-smi and the /proc scan stay in plugins/dcgm.
package manifest

import (
	"encoding/json"
	"time"

	"github.com/better-compute/commands/sdk/kind"
)

// KindName is the kind's name.
const KindName = "diag.dcgm"

// Manifest is diag.dcgm's manifest, served by bc-kind-dcgm and registered
// by the control plane when the metal module is on.
//
// Lane: bulk. Level 3 runs about 15 minutes and level 4 longer; such runs
// belong in the lane sized for long work, not in a provision slot that a GPU
// reset or a deploy step waits for.
//
// Retry-safe: a diagnostic changes nothing on the node, and a rerun checks
// again that the GPUs are idle. Attested: the metal module accepts a node's
// diagnostics only with its signature (nodeSignedResults). Not destructive:
// it refuses GPUs in use instead of disturbing them.
var Manifest = kind.Manifest{
	Kind:        KindName,
	Lane:        kind.LaneBulk,
	Timeout:     kind.Duration(4 * time.Hour),
	Roles:       []string{"node"},
	Flags:       kind.Flags{RetrySafe: true, Attested: true},
	APIRunnable: false,
	PayloadSchema: json.RawMessage(`{
  "type": "object",
  "properties": {
    "level": {"type": "integer", "minimum": 1, "maximum": 4, "description": "1 checks the deployment only; 2 to 4 run dcgmi diag -r N"},
    "gpus": {
      "type": "array",
      "uniqueItems": true,
      "items": {"type": "string", "pattern": "^GPU-[0-9A-Za-z-]+$"},
      "description": "UUIDs of the GPUs to diagnose; none means every GPU"
    }
  },
  "required": ["level"],
  "additionalProperties": false
}`),
	Version:     "0.1.0",
	Description: "DCGM diagnostic: level 1 checks the DCGM deployment, levels 2 to 4 run dcgmi diag on idle GPUs.",
}
