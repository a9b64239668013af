// Command bc-kind-bmc is the bmc.power, bmc.boot and bmc.sensors plugin that
// a site agent's bcd starts. BCD_SITE_INVENTORY (bcd's pluginEnv) names the
// site inventory.
package main

import (
	"fmt"
	"os"

	"github.com/better-compute/commands/plugins/bmc"
	"github.com/better-compute/commands/sdk/kind"
)

func main() {
	logger := kind.NewLogger()
	cfg, err := bmc.ConfigFromEnv()
	if err != nil {
		logger.Error("bad configuration", "error", err)
		fmt.Fprintln(os.Stderr, "bc-kind-bmc:", err)
		os.Exit(1)
	}
	kind.Serve(bmc.New(cfg, logger).Kinds()...)
}
