package kinds

import (
	dcgm "github.com/better-compute/commands/plugins/dcgm/manifest"
	gpureset "github.com/better-compute/commands/plugins/gpureset/manifest"
	logs "github.com/better-compute/commands/plugins/logs/manifest"
	nvml "github.com/better-compute/commands/plugins/nvml/manifest"
	reboot "github.com/better-compute/commands/plugins/reboot/manifest"
	upgrade "github.com/better-compute/commands/plugins/upgrade/manifest"
	"github.com/better-compute/commands/sdk/kind"
)

// FirstParty returns the first-party manifests: the same Go values that the
// plugin binaries serve, imported from each plugin's manifest package
// (plugins/<plugin>/manifest), never copied. Those packages import only
// sdk/kind, so the registry links none of the plugins' code (D-Bus, NVML,
// the GPU tools); TestFirstPartyLinksOnlyTheManifests keeps it so. The
// built-ins are inventory.refresh, diag.nvml, logs.collect, node.reboot and
// gpu.reset; diag.dcgm belongs to the metal module in the spec, and is
// registered here because its plugin ships with bcd and no module registers
// it yet. daemon.upgrade belongs to the rollout module in the spec; it is
// registered here for the same reason (the rollout module sends it, and
// commands.run does not accept it).
//
// EXTEND HERE when a new first-party plugin lands: import its manifest
// package and append its manifest value.
func FirstParty() []kind.Manifest {
	return []kind.Manifest{
		nvml.InventoryRefreshManifest,
		nvml.DiagNVMLManifest,
		logs.Manifest,
		reboot.Manifest,
		gpureset.Manifest,
		dcgm.Manifest,
		upgrade.Manifest,
	}
}
