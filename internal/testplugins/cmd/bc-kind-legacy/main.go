// Command bc-kind-legacy is a test-only plugin built the way plugins were
// before protocol versions were negotiated: go-plugin's plain handshake at
// protocol version 1 (no VersionedPlugins), and a server that knows only
// protocol 1 (no capabilities, no after_cancel). It serves legacy.echo. bcd
// must keep running it: a plugin built on an older SDK keeps working with a
// later bcd.
//
// BCD_TEST_LEGACY_PROTOCOL, when set, is the one version it speaks instead
// (a plugin from a future SDK that this bcd does not know).
package main

import (
	"context"
	"encoding/json"
	"os"
	"strconv"
	"time"

	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"

	"github.com/better-compute/commands/sdk/kind"
	pluginv1 "github.com/better-compute/commands/sdk/proto/bc/plugin/v1"
	"github.com/better-compute/commands/sdk/wire/kindpb"
)

// handshake is protocol 1's handshake as the first SDK wrote it.
var handshake = plugin.HandshakeConfig{
	ProtocolVersion:  1,
	MagicCookieKey:   "BCD_PLUGIN_MAGIC_COOKIE",
	MagicCookieValue: "7c1f0f7e-bcd-kind-plugin",
}

var manifest = kind.Manifest{
	Kind:          "legacy.echo",
	Lane:          kind.LaneControl,
	Timeout:       kind.Duration(time.Minute),
	Roles:         []string{"node"},
	Flags:         kind.Flags{RetrySafe: true},
	PayloadSchema: json.RawMessage(`{"type":"object","properties":{"message":{"type":"string"}},"additionalProperties":false}`),
	Version:       "0.9.0",
	Description:   "Echo the message, served over protocol version 1.",
}

type server struct {
	pluginv1.UnimplementedKindPluginServer
}

func (server) Manifests(context.Context, *pluginv1.ManifestsRequest) (*pluginv1.ManifestsResponse, error) {
	return &pluginv1.ManifestsResponse{Manifests: []*pluginv1.Manifest{kindpb.ManifestToProto(manifest)}, SdkVersion: "0.1.0"}, nil
}

func (server) Execute(req *pluginv1.ExecuteRequest, stream grpc.ServerStreamingServer[pluginv1.ExecuteEvent]) error {
	var p struct{ Message string }
	_ = json.Unmarshal(req.GetCommand().GetPayload(), &p)
	if err := stream.Send(&pluginv1.ExecuteEvent{Event: &pluginv1.ExecuteEvent_Progress{Progress: &pluginv1.Progress{Percent: 50, Message: "legacy step"}}}); err != nil {
		return err
	}
	res, _ := json.Marshal(map[string]string{"message": p.Message, "protocol": "1"})
	return stream.Send(&pluginv1.ExecuteEvent{Event: &pluginv1.ExecuteEvent_Result{Result: &pluginv1.Result{Status: pluginv1.Status_STATUS_SUCCEEDED, Result: res}}})
}

func (server) Cancel(context.Context, *pluginv1.CancelRequest) (*pluginv1.CancelResponse, error) {
	return &pluginv1.CancelResponse{}, nil
}

type grpcPlugin struct {
	plugin.NetRPCUnsupportedPlugin
}

func (grpcPlugin) GRPCServer(_ *plugin.GRPCBroker, s *grpc.Server) error {
	pluginv1.RegisterKindPluginServer(s, server{})
	return nil
}

func (grpcPlugin) GRPCClient(context.Context, *plugin.GRPCBroker, *grpc.ClientConn) (any, error) {
	return nil, nil
}

func main() {
	hs := handshake
	if v, err := strconv.Atoi(os.Getenv("BCD_TEST_LEGACY_PROTOCOL")); err == nil {
		hs.ProtocolVersion = uint(v)
	}
	plugin.Serve(&plugin.ServeConfig{
		HandshakeConfig: hs,
		Plugins:         plugin.PluginSet{"kinds": grpcPlugin{}},
		GRPCServer:      plugin.DefaultGRPCServer,
	})
	os.Exit(0)
}
