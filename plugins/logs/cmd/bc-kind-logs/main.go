// Command bc-kind-logs is the logs.collect plugin that bcd loads.
package main

import (
	"fmt"
	"os"

	"github.com/better-compute/commands/plugins/logs"
	"github.com/better-compute/commands/plugins/logs/manifest"
	"github.com/better-compute/commands/sdk/kind"
)

func main() {
	cfg, err := logs.ConfigFromEnv()
	if err != nil {
		fmt.Fprintln(os.Stderr, "bc-kind-logs:", err)
		os.Exit(1)
	}
	kind.Serve(kind.Kind{Manifest: manifest.Manifest, Handler: logs.Handler(cfg, nil)})
}
