// Package manifest holds the bmc kinds' manifests (bmc.power, bmc.boot,
// bmc.sensors): the Go values that bc-kind-bmc serves and the control
// plane's metal module registers. It imports only sdk/kind, so the control
// plane links neither gofish nor go-ipmi.
package manifest

import (
	"encoding/json"
	"time"

	"github.com/better-compute/commands/sdk/kind"
)

// Kind names.
const (
	PowerKind   = "bmc.power"
	BootKind    = "bmc.boot"
	SensorsKind = "bmc.sensors"
)

// RoleSite is the agent role the BMC kinds run on: a bcd on a management
// host that reaches the BMCs, never the machine whose BMC it drives (a
// machine that powers itself off cannot report that it did).
const RoleSite = "site"

// PowerActions are the actions bmc.power takes.
var PowerActions = []string{"on", "off", "soft", "cycle", "reset"}

// Power is bmc.power's manifest.
//
// Destructive: powering a machine off or cycling it ends whatever runs on
// it, so under the quorum it needs an approved batch. Not retry-safe: a
// cycle run twice cycles twice. Lane control: a power action is short and
// must not wait behind a wipe. Timeout: the providers' time plus the
// verification's wait for a later read that agrees.
var Power = kind.Manifest{
	Kind:        PowerKind,
	Lane:        kind.LaneControl,
	Timeout:     kind.Duration(15 * time.Minute),
	Roles:       []string{RoleSite},
	Flags:       kind.Flags{Destructive: true},
	APIRunnable: true,
	PayloadSchema: json.RawMessage(`{
  "type": "object",
  "properties": {
    "bmc": {"type": "string", "pattern": "^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$", "description": "the BMC's id in the site inventory"},
    "action": {"enum": ["on", "off", "soft", "cycle", "reset"], "description": "on, off (forced), soft (graceful shutdown), cycle (off then on), reset (forced restart)"}
  },
  "required": ["bmc", "action"],
  "additionalProperties": false
}`),
	Version:     "0.1.0",
	Description: "Power a machine on, off, soft off, cycle or reset through its BMC (Redfish, then IPMI); done only when a later read agrees.",
}

// Boot is bmc.boot's manifest. Destructive: the next boot from PXE can
// reinstall the machine.
var Boot = kind.Manifest{
	Kind:        BootKind,
	Lane:        kind.LaneControl,
	Timeout:     kind.Duration(10 * time.Minute),
	Roles:       []string{RoleSite},
	Flags:       kind.Flags{Destructive: true},
	APIRunnable: true,
	PayloadSchema: json.RawMessage(`{
  "type": "object",
  "properties": {
    "bmc": {"type": "string", "pattern": "^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$", "description": "the BMC's id in the site inventory"},
    "device": {"enum": ["pxe", "disk", "cd"], "description": "the boot device"},
    "persistent": {"type": "boolean", "description": "every boot (true) or the next one only (false, the default)"},
    "uefi": {"type": "boolean", "description": "UEFI boot (true, the default) or legacy BIOS"}
  },
  "required": ["bmc", "device"],
  "additionalProperties": false
}`),
	Version:     "0.1.0",
	Description: "Set a machine's boot device (PXE, disk, CD; once or persistent; UEFI or legacy) through its BMC, verified by reading it back.",
}

// Sensors is bmc.sensors' manifest: the BMC diagnostic (sensor readings
// and the event log). Retry-safe and harmless; attested, since the metal
// module accepts diagnostics only with the node's signature.
var Sensors = kind.Manifest{
	Kind:        SensorsKind,
	Lane:        kind.LaneControl,
	Timeout:     kind.Duration(5 * time.Minute),
	Roles:       []string{RoleSite},
	Flags:       kind.Flags{RetrySafe: true, Attested: true},
	APIRunnable: true,
	PayloadSchema: json.RawMessage(`{
  "type": "object",
  "properties": {
    "bmc": {"type": "string", "pattern": "^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$", "description": "the BMC's id in the site inventory"},
    "events": {"type": "integer", "minimum": 0, "maximum": 1000, "description": "how many of the newest event log entries to return (50 by default)"}
  },
  "required": ["bmc"],
  "additionalProperties": false
}`),
	Version:     "0.1.0",
	Description: "Read a machine's sensors and BMC event log (Redfish, then IPMI).",
}

// All are the bmc plugin's manifests.
func All() []kind.Manifest { return []kind.Manifest{Power, Boot, Sensors} }
