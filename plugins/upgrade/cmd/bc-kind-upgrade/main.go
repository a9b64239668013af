// Command bc-kind-upgrade is the daemon.upgrade plugin that bcd loads. It
// reaches systemd on the system D-Bus, or on BCD_SYSTEM_BUS_ADDRESS.
package main

import (
	"github.com/better-compute/commands/plugins/upgrade"
	"github.com/better-compute/commands/plugins/upgrade/manifest"
	"github.com/better-compute/commands/sdk/kind"
)

func main() {
	kind.Serve(kind.Kind{Manifest: manifest.Manifest, Handler: upgrade.Handler(upgrade.ConfigFromEnv())})
}
