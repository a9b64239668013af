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

// The protocol versions of bc.plugin.v1, negotiated in go-plugin's
// handshake (its versioned plugins): the host offers every version it
// speaks (PLUGIN_PROTOCOL_VERSIONS) and the plugin picks the highest it
// knows too, so a plugin built on an older SDK keeps working with a later
// bcd, and a plugin built on a later SDK with an older bcd. A version only
// adds to the one before (see plugin.proto); what a host may expect of a
// plugin follows from the version negotiated (Client.Protocol).
const (
	// ProtocolVersion1 is the first protocol: Manifests, Execute with
	// progress and result, Cancel, the Host service over the broker.
	ProtocolVersion1 = 1
	// ProtocolVersion2 adds the plugin's capabilities to ManifestsResponse
	// and marks progress reported after the command's context ended
	// (Progress.after_cancel).
	ProtocolVersion2 = 2
	// ProtocolVersion is the newest version, the one this SDK's plugins and
	// hosts prefer.
	ProtocolVersion = ProtocolVersion2
)

// ProtocolVersions are the versions this side speaks, oldest first.
var ProtocolVersions = []int{ProtocolVersion1, ProtocolVersion2}

// Capabilities a protocol-2 plugin lists in ManifestsResponse.capabilities.
const (
	// CapabilityCancel: the plugin serves the Cancel RPC (every plugin of
	// protocol 1 does too).
	CapabilityCancel = "cancel"
	// CapabilityProgressAfterCancel: the plugin marks a progress report
	// made after the command's context ended (Progress.after_cancel), and
	// logs a report made after the handler returned, so the conformance
	// harness can tell a handler that stopped from one that went on.
	CapabilityProgressAfterCancel = "progress-after-cancel"
	// CapabilityInjectedPanic: the plugin makes the handler of the command
	// named by EnvInjectPanic panic, so the conformance harness can check
	// that a panic becomes a failed result on a plugin with no kind that
	// panics of its own accord.
	CapabilityInjectedPanic = "injected-panic"
)

// Capabilities are the capabilities this SDK's plugins list.
var Capabilities = []string{CapabilityCancel, CapabilityProgressAfterCancel, CapabilityInjectedPanic}

// EnvInjectPanic names the environment variable that holds the id of one
// command whose handler panics instead of running (the conformance
// harness's panic check). bcd never passes it: a plugin gets only
// BaseEnv and the variables its host allowlists, and no allowlist names
// it; a plugin started without it never panics on purpose.
const EnvInjectPanic = "BC_KINDTEST_INJECT_PANIC"

// LateProgressMessage is the log message of a plugin whose handler reported
// progress after it returned its result (work left running): the harness
// looks for it, and bcd's log shows it under the plugin's name.
const LateProgressMessage = "progress reported after the handler returned: its work goes on after its result"

// PluginName is the one plugin every kind binary serves.
const PluginName = "kinds"

// MaxMessageBytes bounds one gRPC message either way. A clean error beats an
// OOM kill (terraform-plugin-go makes the same choice); results larger than
// this belong in a blob, as support bundles are.
const MaxMessageBytes = 64 << 20

// Handshake is the handshake both sides share. The cookie only stops a user
// from running a plugin binary by hand; it is not a security measure. Its
// ProtocolVersion is the newest; both sides negotiate over
// VersionedPlugins, which names every version.
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
	// Protocol is the protocol version negotiated with the plugin
	// (ProtocolVersion1, ProtocolVersion2); set by Dispense.
	Protocol int
}

// PluginSet is the set both sides pass to go-plugin for one version.
func PluginSet(server func(*plugin.GRPCBroker) pluginv1.KindPluginServer) plugin.PluginSet {
	return plugin.PluginSet{PluginName: &GRPCPlugin{NewServer: server}}
}

// VersionedPlugins maps every protocol version this side speaks to its
// plugin set. Every version is served by the same gRPC service: a later
// version only adds fields and RPCs, so one server answers them all, and
// the host reads what the negotiated version promises.
func VersionedPlugins(server func(*plugin.GRPCBroker) pluginv1.KindPluginServer) map[int]plugin.PluginSet {
	out := make(map[int]plugin.PluginSet, len(ProtocolVersions))
	for _, v := range ProtocolVersions {
		out[v] = PluginSet(server)
	}
	return out
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
