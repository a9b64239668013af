// Package plugintest runs a GPU kind plugin binary out of process, as bcd
// does: go-plugin's handshake, real gRPC, and a Host service served back to
// the plugin over go-plugin's broker from a kind.Host the test implements.
// The GPU kind tests use it until a shared sdk/kindtest harness exists.
package plugintest

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"os/exec"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/timestamppb"

	pluginv1 "github.com/better-compute/commands/proto/bc/plugin/v1"
	"github.com/better-compute/commands/sdk/kind"
	"github.com/better-compute/commands/sdk/wire"
)

// Plugin is a running plugin process.
type Plugin struct {
	client *plugin.Client
	kinds  *wire.Client
}

// Start runs the binary at path with env added to the test's environment
// and completes the handshake. The process is killed when the test ends.
func Start(t testing.TB, path string, env ...string) *Plugin {
	t.Helper()
	cmd := exec.Command(path)
	cmd.Env = append(cmd.Environ(), env...)
	c := plugin.NewClient(&plugin.ClientConfig{
		HandshakeConfig:  wire.Handshake,
		Plugins:          wire.PluginSet(nil),
		Cmd:              cmd,
		AllowedProtocols: []plugin.Protocol{plugin.ProtocolGRPC},
		GRPCDialOptions:  wire.DialOptions(),
		Logger:           hclog.New(&hclog.LoggerOptions{Name: "plugin", Output: testWriter{t}, Level: hclog.Debug}),
		StartTimeout:     30 * time.Second,
	})
	t.Cleanup(c.Kill)
	rpc, err := c.Client()
	if err != nil {
		t.Fatalf("starting plugin %s: %v", path, err)
	}
	raw, err := rpc.Dispense(wire.PluginName)
	if err != nil {
		t.Fatalf("dispensing plugin: %v", err)
	}
	return &Plugin{client: c, kinds: raw.(*wire.Client)}
}

// Manifests returns the manifests the plugin serves.
func (p *Plugin) Manifests(ctx context.Context) ([]kind.Manifest, error) {
	resp, err := p.kinds.Manifests(ctx, &pluginv1.ManifestsRequest{})
	if err != nil {
		return nil, err
	}
	out := make([]kind.Manifest, 0, len(resp.GetManifests()))
	for _, m := range resp.GetManifests() {
		out = append(out, kind.ManifestFromProto(m))
	}
	return out, nil
}

// Execute runs one command with host served back to the plugin, and returns
// its result and the progress messages it streamed.
func (p *Plugin) Execute(ctx context.Context, kindName string, payload json.RawMessage, host kind.Host) (kind.Result, []string, error) {
	id := p.kinds.Broker.NextId()
	go p.kinds.Broker.AcceptAndServe(id, func(opts []grpc.ServerOption) *grpc.Server {
		s := grpc.NewServer(append(opts, wire.ServerOptions()...)...)
		pluginv1.RegisterHostServer(s, hostServer{h: host})
		return s
	})
	stream, err := p.kinds.Execute(ctx, &pluginv1.ExecuteRequest{
		Command: &pluginv1.Command{
			Id: "cmd_test", Kind: kindName, Payload: payload, NodeId: "node_test",
			Deadline: timestamppb.New(time.Now().Add(time.Minute)),
		},
		HostBrokerId: id,
	})
	if err != nil {
		return kind.Result{}, nil, err
	}
	var progress []string
	for {
		ev, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return kind.Result{}, progress, errors.New("stream ended without a result")
		}
		if err != nil {
			return kind.Result{}, progress, err
		}
		if pr := ev.GetProgress(); pr != nil {
			progress = append(progress, pr.GetMessage())
		}
		if r := ev.GetResult(); r != nil {
			return kind.ResultFromProto(r), progress, nil
		}
	}
}

// hostServer serves a kind.Host as bcd's Host service.
type hostServer struct {
	pluginv1.UnimplementedHostServer
	h kind.Host
}

func (s hostServer) GetInventory(ctx context.Context, _ *pluginv1.GetInventoryRequest) (*pluginv1.GetInventoryResponse, error) {
	inv, at, err := s.h.Inventory(ctx)
	if err != nil {
		return nil, err
	}
	resp := &pluginv1.GetInventoryResponse{Inventory: inv}
	if !at.IsZero() {
		resp.CollectedAt = timestamppb.New(at)
	}
	return resp, nil
}

func (s hostServer) PutInventory(ctx context.Context, req *pluginv1.PutInventoryRequest) (*pluginv1.PutInventoryResponse, error) {
	return &pluginv1.PutInventoryResponse{}, s.h.PutInventory(ctx, req.GetInventory())
}

func (s hostServer) GetNodeSpec(ctx context.Context, _ *pluginv1.GetNodeSpecRequest) (*pluginv1.GetNodeSpecResponse, error) {
	gen, spec, err := s.h.NodeSpec(ctx)
	if err != nil {
		return nil, err
	}
	return &pluginv1.GetNodeSpecResponse{Generation: gen, Spec: spec}, nil
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(string(p))
	return len(p), nil
}
