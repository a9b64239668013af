// Command bc-kind-example is the example kind plugin. bcd starts it from its
// plugin directory; run by hand, it refuses, since go-plugin's handshake
// cookie is missing.
package main

import (
	"github.com/better-compute/commands/sdk/example"
	"github.com/better-compute/commands/sdk/kind"
)

func main() {
	// Nothing may print to stdout before Serve: the handshake owns it.
	kind.Serve(example.Kinds()...)
}
