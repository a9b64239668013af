package kinds

import "github.com/better-compute/commands/sdk/kind"

// FirstParty returns the first-party manifests: the same Go values that the
// plugin binaries serve, imported from their packages, never copied.
//
// EXTEND HERE: the plugin packages (plugins/nvml, plugins/gpureset,
// plugins/reboot, plugins/logs, inventory.refresh in bcd) are being written in
// parallel. When one lands, append its exported manifest value(s) below, for
// example `nvml.Manifest`. Until then the list is empty and callers register
// what they need with Registry.Register.
func FirstParty() []kind.Manifest {
	return []kind.Manifest{
		// nvml.DiagManifest, inventory.RefreshManifest, logs.CollectManifest,
		// reboot.Manifest, gpureset.Manifest
	}
}
