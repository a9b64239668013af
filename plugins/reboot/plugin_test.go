package reboot_test

import (
	"context"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"
	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/internal/testutil"
	"github.com/better-compute/commands/plugins/reboot"
	"github.com/better-compute/commands/plugins/reboot/manifest"
	"github.com/better-compute/commands/sdk/kind"
	"github.com/better-compute/commands/sdk/kindtest"
	pluginv1 "github.com/better-compute/commands/sdk/proto/bc/plugin/v1"
	"github.com/better-compute/commands/sdk/wire"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testutil.CleanupBuilds()
	os.Exit(code)
}

// The real bc-kind-reboot binary, as bcd loads it, serves the same manifest
// and reboots through logind on the bus that BCD_SYSTEM_BUS_ADDRESS names.
func TestPluginBinaryOutOfProcess(t *testing.T) {
	addr := startBus(t)
	logind := startLogind(t, addr, nil)
	bin := testutil.BuildBinary(t, "./plugins/reboot/cmd/bc-kind-reboot")

	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), reboot.EnvBusAddress+"="+addr)
	client := plugin.NewClient(&plugin.ClientConfig{
		HandshakeConfig:  wire.Handshake,
		Plugins:          wire.PluginSet(nil),
		Cmd:              cmd,
		AllowedProtocols: []plugin.Protocol{plugin.ProtocolGRPC},
		Logger:           hclog.New(&hclog.LoggerOptions{Output: io.Discard}),
		GRPCDialOptions:  wire.DialOptions(),
	})
	t.Cleanup(client.Kill)
	rpc, err := client.Client()
	require.NoError(t, err)
	raw, err := rpc.Dispense(wire.PluginName)
	require.NoError(t, err)
	kc := raw.(*wire.Client)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ms, err := kc.Manifests(ctx, &pluginv1.ManifestsRequest{})
	require.NoError(t, err)
	require.Len(t, ms.GetManifests(), 1)
	require.Equal(t, manifest.Manifest.Digest(), kind.ManifestFromProto(ms.GetManifests()[0]).Digest(),
		"the binary serves the very manifest the control plane registers")

	stream, err := kc.Execute(ctx, &pluginv1.ExecuteRequest{Command: &pluginv1.Command{
		Id: "cmd_oop", Kind: manifest.KindName, NodeId: "node_oop", Payload: []byte(`{}`),
	}})
	require.NoError(t, err)
	var res *pluginv1.Result
	for res == nil {
		ev, err := stream.Recv()
		require.NoError(t, err)
		res = ev.GetResult()
	}
	r := kind.ResultFromProto(res)
	require.Equal(t, kind.StatusSucceeded, r.Status, r.Message)
	require.JSONEq(t, `{"accepted":true,"via":"logind"}`, string(r.Data))
	require.Equal(t, []bool{false}, logind.Calls())
}

// bc-kind-reboot passes the SDK's conformance harness.
func TestPluginConformance(t *testing.T) {
	addr := startBus(t)
	startLogind(t, addr, nil)
	bin := testutil.BuildBinary(t, "./plugins/reboot/cmd/bc-kind-reboot")
	kindtest.Run(t, bin, kindtest.Options{
		Kinds:       []string{manifest.KindName},
		Env:         []string{reboot.EnvBusAddress + "=" + addr},
		BadPayloads: map[string]json.RawMessage{manifest.KindName: json.RawMessage(`{"force":true}`)},
	})
}
