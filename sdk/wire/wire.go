// Package wire is the go-plugin glue shared by kind plugins (through sdk/kind)
// and by bcd's plugin host: the handshake, the plugin name, message limits and
// the GRPCPlugin adapter. Plugin authors never import it.
package wire

import (
	"context"

	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"

	pluginv1 "github.com/better-compute/commands/sdk/proto/bc/plugin/v1"
)

// ProtocolVersion is go-plugin's wire version for bc.plugin.v1.
const ProtocolVersion = 1

// PluginName is the one plugin every kind binary serves.
const PluginName = "kinds"

// MaxMessageBytes bounds one gRPC message either way. A clean error beats an
// OOM kill (terraform-plugin-go makes the same choice); results larger than
// this belong in a blob, as support bundles are.
const MaxMessageBytes = 64 << 20

// Handshake is the handshake both sides share. The cookie only stops a user
// from running a plugin binary by hand; it is not a security measure.
var Handshake = plugin.HandshakeConfig{
	ProtocolVersion:  ProtocolVersion,
	MagicCookieKey:   "BCD_PLUGIN_MAGIC_COOKIE",
	MagicCookieValue: "7c1f0f7e-bcd-kind-plugin",
}

// EnvLogLevel names the environment variable that sets a plugin's log level.
const EnvLogLevel = "BCD_PLUGIN_LOG_LEVEL"

// GRPCPlugin adapts a KindPluginServer (plugin side) or produces a Client (host
// side) for go-plugin. It speaks gRPC only: never net/rpc.
type GRPCPlugin struct {
	plugin.NetRPCUnsupportedPlugin
	// NewServer is set on the plugin side.
	NewServer func(broker *plugin.GRPCBroker) pluginv1.KindPluginServer
}

var _ plugin.GRPCPlugin = (*GRPCPlugin)(nil)

// GRPCServer registers the kind service.
func (p *GRPCPlugin) GRPCServer(broker *plugin.GRPCBroker, s *grpc.Server) error {
	pluginv1.RegisterKindPluginServer(s, p.NewServer(broker))
	return nil
}

// GRPCClient returns a *Client.
func (p *GRPCPlugin) GRPCClient(ctx context.Context, broker *plugin.GRPCBroker, c *grpc.ClientConn) (any, error) {
	return &Client{KindPluginClient: pluginv1.NewKindPluginClient(c), Broker: broker, Done: ctx}, nil
}

// Client is the host's handle on a plugin process.
type Client struct {
	pluginv1.KindPluginClient
	// Broker lets the host serve the Host service to the plugin.
	Broker *plugin.GRPCBroker
	// Done is cancelled when the plugin process exits.
	Done context.Context
}

// PluginSet is the set both sides pass to go-plugin.
func PluginSet(server func(*plugin.GRPCBroker) pluginv1.KindPluginServer) plugin.PluginSet {
	return plugin.PluginSet{PluginName: &GRPCPlugin{NewServer: server}}
}

// ServerOptions are the gRPC limits a plugin serves with.
func ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.MaxRecvMsgSize(MaxMessageBytes),
		grpc.MaxSendMsgSize(MaxMessageBytes),
	}
}

// DialOptions are the gRPC limits the host dials with.
func DialOptions() []grpc.DialOption {
	return []grpc.DialOption{grpc.WithDefaultCallOptions(
		grpc.MaxCallRecvMsgSize(MaxMessageBytes),
		grpc.MaxCallSendMsgSize(MaxMessageBytes),
	)}
}
