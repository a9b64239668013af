// Command bc-kind-badmanifest is a test-only plugin that serves a manifest
// failing validation. The SDK refuses to serve one, so it speaks the protocol
// directly, as a plugin built without the SDK could.
package main

import (
	"context"
	"os"

	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"

	pluginv1 "github.com/better-compute/commands/sdk/proto/bc/plugin/v1"
	"github.com/better-compute/commands/sdk/wire"
)

type server struct {
	pluginv1.UnimplementedKindPluginServer
}

func (server) Manifests(context.Context, *pluginv1.ManifestsRequest) (*pluginv1.ManifestsResponse, error) {
	// No lane, no timeout, no roles, and a kind name with upper case.
	return &pluginv1.ManifestsResponse{Manifests: []*pluginv1.Manifest{{Kind: "Test.Bad", Version: "1"}}}, nil
}

func main() {
	plugin.Serve(&plugin.ServeConfig{
		HandshakeConfig: wire.Handshake,
		Plugins:         wire.PluginSet(func(*plugin.GRPCBroker) pluginv1.KindPluginServer { return server{} }),
		GRPCServer: func(opts []grpc.ServerOption) *grpc.Server {
			return grpc.NewServer(append(opts, wire.ServerOptions()...)...)
		},
	})
	os.Exit(0)
}
