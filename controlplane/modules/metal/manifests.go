// Package metal is the control plane's metal module: the kinds it
// registers (the BMC kinds, site.httpProxy, disk.wipe, disk.deploy and
// diag.dcgm, each the Go value
// its plugin serves) and its workflows, metal.power and metal.bulk, which
// queue BMC actions across many machines on a site agent, each run under a
// batch of its own whose leaves name each machine.
package metal

import (
	bmc "github.com/better-compute/commands/plugins/bmc/manifest"
	dcgm "github.com/better-compute/commands/plugins/dcgm/manifest"
	disk "github.com/better-compute/commands/plugins/disk/manifest"
	siteproxy "github.com/better-compute/commands/plugins/siteproxy/manifest"
	"github.com/better-compute/commands/sdk/kind"
)

// Manifests are the kinds the metal module registers: bmc.power, bmc.boot,
// bmc.sensors and site.httpProxy (run by a site agent), disk.wipe and
// disk.deploy (run on the machine itself), and diag.dcgm (run by the node;
// its plugin ships with bcd, its registration is the module's).
// Like kinds.FirstParty, they are the plugins' own manifest values.
func Manifests() []kind.Manifest {
	return append(bmc.All(), siteproxy.Manifest, disk.WipeManifest, disk.DeployManifest, dcgm.Manifest)
}
