// Command bc-kind-nvml is the bcd plugin that serves inventory.refresh and
// diag.nvml. bcd starts it with an allowlisted environment (see
// nvml.EnvVars) that selects the NVML source, nvidia-smi's path, the kernel
// log, the sysfs root and the XID store.
package main

import (
	"fmt"
	"os"

	"github.com/better-compute/commands/plugins/nvml"
	"github.com/better-compute/commands/plugins/nvml/nvmldriver"
	"github.com/better-compute/commands/sdk/kind"
)

func main() {
	logger := kind.NewLogger().Named("nvml")
	cfg, err := nvml.ConfigFromEnv(os.Getenv)
	if err != nil {
		logger.Error("bad settings", "error", err)
		fmt.Fprintln(os.Stderr, "bc-kind-nvml:", err)
		os.Exit(1)
	}
	p := &nvml.Plugin{Config: cfg, Logger: logger}
	if cfg.NVMLSource != "none" {
		drv, err := nvmldriver.OpenState(cfg.NVMLSource, cfg.NVMLFaults, cfg.NVMLState)
		if err != nil {
			logger.Error("bad NVML source", "error", err)
			fmt.Fprintln(os.Stderr, "bc-kind-nvml:", err)
			os.Exit(1)
		}
		if why := drv.InitError(); why != "" {
			// Not fatal: inventory.refresh still reports nvidia-smi and the
			// kernel's view, and diag.nvml says what is wrong.
			logger.Warn("nvml unavailable", "reason", why)
		}
		p.NVML = drv
	}
	kind.Serve(p.Kinds()...)
}
