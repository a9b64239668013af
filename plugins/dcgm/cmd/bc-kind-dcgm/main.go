// Command bc-kind-dcgm is the diag.dcgm plugin that bcd starts.
package main

import (
	"fmt"
	"os"

	"github.com/better-compute/commands/plugins/dcgm"
	"github.com/better-compute/commands/plugins/dcgm/manifest"
	"github.com/better-compute/commands/sdk/kind"
)

func main() {
	cfg, err := dcgm.ConfigFromEnv()
	if err != nil {
		kind.NewLogger().Error("bad configuration", "error", err)
		fmt.Fprintln(os.Stderr, "bc-kind-dcgm:", err)
		os.Exit(1)
	}
	kind.Serve(kind.Kind{Manifest: manifest.Manifest, Handler: dcgm.Handler(cfg)})
}
