package kinds

import (
	"github.com/better-compute/commands/plugins/dcgm"
	"github.com/better-compute/commands/plugins/gpureset"
	"github.com/better-compute/commands/plugins/logs"
	"github.com/better-compute/commands/plugins/nvml"
	"github.com/better-compute/commands/plugins/reboot"
	"github.com/better-compute/commands/sdk/kind"
)

// FirstParty returns the first-party manifests: the same Go values that the
// plugin binaries serve, imported from their packages, never copied. The
// built-ins are inventory.refresh, diag.nvml, logs.collect, node.reboot and
// gpu.reset; diag.dcgm belongs to the metal module in the spec, and is
// registered here because its plugin ships with bcd and no module registers
// it yet.
//
// EXTEND HERE when a new first-party plugin lands: append its exported
// manifest value.
func FirstParty() []kind.Manifest {
	out := append([]kind.Manifest(nil), nvml.Manifests...)
	return append(out,
		logs.Manifest,
		reboot.Manifest,
		gpureset.Manifest,
		dcgm.Manifest,
	)
}
