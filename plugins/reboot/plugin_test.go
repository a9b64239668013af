package reboot_test

import (
	"context"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"
	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/internal/fakebus"
	"github.com/better-compute/commands/internal/testutil"
	"github.com/better-compute/commands/plugins/reboot"
	"github.com/better-compute/commands/plugins/reboot/manifest"
	"github.com/better-compute/commands/sdk/kind"
	"github.com/better-compute/commands/sdk/kindtest"
	pluginv1 "github.com/better-compute/commands/sdk/proto/bc/plugin/v1"
	"github.com/better-compute/commands/sdk/wire"
	"github.com/better-compute/commands/sdk/wire/kindpb"
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

	r := executeBinary(t, bin, []string{reboot.EnvBusAddress + "=" + addr})
	require.Equal(t, kind.StatusSucceeded, r.Status, r.Message)
	require.JSONEq(t, `{"accepted":true,"via":"logind"}`, string(r.Data))
	require.Equal(t, []bool{false}, logind.Calls())
}

// The real binary's failure reaches bcd with the detail in the result and
// the message: no bus at BCD_SYSTEM_BUS_ADDRESS is no-bus on logind's path.
func TestPluginBinaryReportsTheFailureDetail(t *testing.T) {
	bin := testutil.BuildBinary(t, "./plugins/reboot/cmd/bc-kind-reboot")
	r := executeBinary(t, bin, []string{reboot.EnvBusAddress + "=unix:path=" + t.TempDir() + "/no-bus"})
	require.Equal(t, kind.StatusFailed, r.Status)
	require.Equal(t, reboot.ReasonNoBus, r.Reason)
	require.Contains(t, r.Message, "asking logind for the reboot: connecting to D-Bus at unix:path=")
	var res reboot.FailureResult
	require.NoError(t, json.Unmarshal(r.Data, &res), string(r.Data))
	require.Equal(t, reboot.ViaLogind, res.Path)
	require.Contains(t, res.Error, "no-bus")
}

// bc-kind-reboot passes the SDK's conformance harness.
func TestPluginConformance(t *testing.T) {
	addr := startBus(t)
	// A logind that never answers Reboot (as one stuck on an inhibitor
	// would not): node.reboot waits on it until cancelled.
	unblock := make(chan struct{})
	var unblockOnce sync.Once
	release := func() { unblockOnce.Do(func() { close(unblock) }) }
	t.Cleanup(release)
	answered := make(chan struct{}, 16)
	_, err := fakebus.ServeLogind(connect(t, addr), nil, func(bool) {
		<-unblock
		answered <- struct{}{}
	})
	require.NoError(t, err)
	bin := testutil.BuildBinary(t, "./plugins/reboot/cmd/bc-kind-reboot")
	rebootCase := kindtest.Case{Kind: manifest.KindName, Payload: json.RawMessage(`{}`)}
	kindtest.Run(t, bin, kindtest.Options{
		Kinds:       []string{manifest.KindName},
		Env:         []string{reboot.EnvBusAddress + "=" + addr},
		BadPayloads: map[string]json.RawMessage{manifest.KindName: json.RawMessage(`{"force":true}`)},
		LongRunning: &rebootCase,
		InjectPanic: &rebootCase,
	})
	// The cancelled call did reach the fake logind (it was the wait that
	// was cancelled, not a failure to ask).
	release()
	select {
	case <-answered:
	case <-time.After(10 * time.Second):
		t.Fatal("the cancelled Reboot call never reached the fake logind")
	}
}

// executeBinary loads bin as bcd does, with env added, checks it serves the
// registered manifest, and runs one node.reboot through it.
func executeBinary(t *testing.T, bin string, env []string) kind.Result {
	t.Helper()
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), env...)
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
	require.Equal(t, manifest.Manifest.Digest(), kindpb.ManifestFromProto(ms.GetManifests()[0]).Digest(),
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
	return kindpb.ResultFromProto(res)
}
