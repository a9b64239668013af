// Command bc-kind-stdout is a test-only plugin that breaks the rule: its kind
// writes to stdout after the handshake.
package main

import (
	"context"
	"fmt"
	"time"

	"github.com/better-compute/commands/sdk/kind"
)

func main() {
	kind.Serve(kind.Kind{
		Manifest: kind.Manifest{
			Kind:    "test.stdout",
			Lane:    kind.LaneControl,
			Timeout: kind.Duration(time.Minute),
			Roles:   []string{"node"},
			Version: "0.1.0",
		},
		Handler: kind.HandlerFunc(func(context.Context, kind.Request) (any, error) {
			fmt.Println("test.stdout writes to stdout")
			return struct{}{}, nil
		}),
	})
}
