// Command bc-kind-gpureset is the gpu.reset plugin that bcd starts.
package main

import (
	"fmt"
	"os"

	"github.com/better-compute/commands/plugins/gpureset"
	"github.com/better-compute/commands/plugins/gpureset/manifest"
	"github.com/better-compute/commands/sdk/kind"
)

func main() {
	cfg, err := gpureset.ConfigFromEnv()
	if err != nil {
		kind.NewLogger().Error("bad configuration", "error", err)
		fmt.Fprintln(os.Stderr, "bc-kind-gpureset:", err)
		os.Exit(1)
	}
	kind.Serve(kind.Kind{Manifest: manifest.Manifest, Handler: gpureset.Handler(cfg)})
}
