// Command better-compute is the CLI of the better-compute API; see
// `better-compute --help` and package controlplane/front/cli.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/better-compute/commands/controlplane/front/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli.Main(ctx, cli.OSEnv())
	stop()
	os.Exit(code)
}
