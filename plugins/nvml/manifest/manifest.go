// Package manifest holds the manifests of inventory.refresh and diag.nvml:
// the Go values that bc-kind-nvml serves and the control plane's registry
// imports. It imports only sdk/kind, so that the registry (and bc-server)
// links none of the plugin's code: the collectors, nvidia-smi, the kernel
// log reader and go-nvml (cgo) stay in plugins/nvml.
package manifest

import (
	"encoding/json"
	"time"

	"github.com/better-compute/commands/sdk/kind"
)

// The kinds this package serves.
const (
	KindInventoryRefresh = "inventory.refresh"
	KindDiagNVML         = "diag.nvml"
)

// InventoryRefreshManifest is inventory.refresh: collect the GPU inventory
// again (NVML, nvidia-smi, the kernel's view, this boot's XIDs), update
// bcd's inventory, and return it.
var InventoryRefreshManifest = kind.Manifest{
	Kind:        KindInventoryRefresh,
	Lane:        kind.LaneControl,
	Timeout:     kind.Duration(2 * time.Minute),
	Roles:       []string{"node", "discovery"},
	Flags:       kind.Flags{RetrySafe: true},
	APIRunnable: true,
	PayloadSchema: json.RawMessage(`{
  "$schema": "https://json-schema.org/draft/2020-12/schema",
  "type": "object",
  "additionalProperties": false,
  "properties": {
    "sections": {
      "description": "The sections to collect again; the others are carried over. Default: all.",
      "type": "array",
      "items": {"enum": ["gpus", "xids", "pcie"]},
      "uniqueItems": true
    },
    "rescan": {
      "description": "Ask the kernel to rescan the PCI bus first (after a GPU swap).",
      "type": "boolean"
    }
  }
}`),
	Version:     "1.0.0",
	Description: "Collect the GPU inventory again (NVML, nvidia-smi, the kernel, this boot's XIDs) and update the node's inventory.",
}

// DiagNVMLManifest is diag.nvml: judge the collected GPU inventory with the
// checks nvml.init, gpus.visible, gpus.count, then per GPU
// ecc.uncorrectable, row-remap.pending, row-remap.failure, pcie.link and
// xid.recent. It fails with checks-failed when a check fails.
var DiagNVMLManifest = kind.Manifest{
	Kind:        KindDiagNVML,
	Lane:        kind.LaneControl,
	Timeout:     kind.Duration(2 * time.Minute),
	Roles:       []string{"node", "discovery"},
	Flags:       kind.Flags{RetrySafe: true},
	APIRunnable: true,
	PayloadSchema: json.RawMessage(`{
  "$schema": "https://json-schema.org/draft/2020-12/schema",
  "type": "object",
  "additionalProperties": false,
  "properties": {
    "expectedCount": {
      "description": "How many GPUs the node should have; default: the node's configured count.",
      "type": "integer",
      "minimum": 0,
      "maximum": 1024
    },
    "refresh": {
      "description": "Collect a fresh inventory instead of judging the one the node holds.",
      "type": "boolean"
    }
  }
}`),
	Version:     "1.0.0",
	Description: "Check the GPUs from the collected inventory: driver answers, visible count, ECC, row remapping, PCIe width, XIDs this boot.",
}
