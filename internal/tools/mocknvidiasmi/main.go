// Command mocknvidiasmi is a mock nvidia-smi for nodes on mock GPUs (bcd's
// nvmlSource mock:dgxh200), so that make demo can run the GPU kinds that
// execute nvidia-smi, gpu.reset above all, on anyone's machine: bcd's
// pluginEnv points BCD_NVIDIA_SMI at it, and it answers from the same mock
// GPUs as the nvml plugin, kept in the file BCD_NVML_MOCK_STATE names. A
// reset through it clears the mock GPU's pending row remap there, and the
// next inventory.refresh shows it cleared. See plugins/nvml/mocksmi.
//
//	BCD_NVML=mock:dgxh200 BCD_NVML_MOCK_STATE=gpus.json mocknvidiasmi --gpu-reset -i 3
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/better-compute/commands/plugins/nvml/mocksmi"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := mocksmi.Main(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
