// Command bc-kind-reboot is the node.reboot plugin that bcd loads. It talks to
// the system D-Bus, or to the bus named by BCD_SYSTEM_BUS_ADDRESS.
package main

import (
	"github.com/better-compute/commands/plugins/reboot"
	"github.com/better-compute/commands/plugins/reboot/manifest"
	"github.com/better-compute/commands/sdk/kind"
)

func main() {
	kind.Serve(kind.Kind{Manifest: manifest.Manifest, Handler: reboot.Handler(reboot.ConfigFromEnv())})
}
