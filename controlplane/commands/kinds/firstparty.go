package kinds

import (
	gpureset "github.com/better-compute/commands/plugins/gpureset/manifest"
	logs "github.com/better-compute/commands/plugins/logs/manifest"
	nvml "github.com/better-compute/commands/plugins/nvml/manifest"
	reboot "github.com/better-compute/commands/plugins/reboot/manifest"
	"github.com/better-compute/commands/sdk/kind"
)

// FirstParty returns the first-party manifests: the same Go values that the
// plugin binaries serve, imported from each plugin's manifest package
// (plugins/<plugin>/manifest), never copied. Those packages import only
// sdk/kind, so the registry links none of the plugins' code (D-Bus, NVML,
// the GPU tools); TestFirstPartyLinksOnlyTheManifests keeps it so. The
// built-ins are inventory.refresh, diag.nvml, logs.collect, node.reboot and
// gpu.reset. diag.dcgm (whose plugin also ships with bcd), disk.wipe and
// disk.deploy are the metal module's: controlplane/modules/metal.Manifests registers
// them with the BMC kinds.
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
	}
}
