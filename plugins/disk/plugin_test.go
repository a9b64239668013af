package disk_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"
	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/internal/testutil"
	"github.com/better-compute/commands/plugins/disk/internal/loopdev"
	"github.com/better-compute/commands/plugins/disk/manifest"
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

type lockedBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// start loads bin as bcd does, checks it serves the registered manifests,
// and returns its client and what it logged.
func start(t *testing.T, bin string) (*wire.Client, *lockedBuf) {
	t.Helper()
	logs := &lockedBuf{}
	client := plugin.NewClient(&plugin.ClientConfig{
		HandshakeConfig:  wire.Handshake,
		Plugins:          wire.PluginSet(nil),
		Cmd:              exec.Command(bin),
		AllowedProtocols: []plugin.Protocol{plugin.ProtocolGRPC},
		Logger:           hclog.New(&hclog.LoggerOptions{Output: logs, Level: hclog.Trace, JSONFormat: true}),
		GRPCDialOptions:  wire.DialOptions(),
	})
	t.Cleanup(client.Kill)
	rpc, err := client.Client()
	require.NoError(t, err)
	raw, err := rpc.Dispense(wire.PluginName)
	require.NoError(t, err)
	kc := raw.(*wire.Client)
	ms, err := kc.Manifests(context.Background(), &pluginv1.ManifestsRequest{})
	require.NoError(t, err)
	got := map[string]string{}
	for _, m := range ms.GetManifests() {
		km := kindpb.ManifestFromProto(m)
		got[km.Kind] = km.Digest()
	}
	require.Equal(t, map[string]string{manifest.WipeKind: manifest.WipeManifest.Digest(), manifest.DeployKind: manifest.DeployManifest.Digest()}, got,
		"the binary serves the very manifests the control plane registers")
	return kc, logs
}

func execute(t *testing.T, kc *wire.Client, c *pluginv1.Command) kind.Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := wire.Execute(ctx, kc, &pluginv1.ExecuteRequest{Command: c}, nil, 5*time.Second)
	require.NoError(t, err)
	return kindpb.ResultFromProto(res)
}

// The real bc-kind-disk wipes a loop device's metadata out of process and
// reports it as metadata, never as a wipe.
func TestPluginBinary_WipesMetadataOutOfProcess(t *testing.T) {
	dev := loopdev.New(t, 8<<20, loopdev.Options{})
	loopdev.Run(t, "mkfs.ext4", "-q", "-F", dev)
	kc, _ := start(t, testutil.BuildBinary(t, "./plugins/disk/cmd/bc-kind-disk"))
	r := execute(t, kc, &pluginv1.Command{Id: "cmd_w", Kind: manifest.WipeKind, NodeId: "node_a", Payload: []byte(`{"device":"` + dev + `","mode":"metadata"}`)})
	require.Equal(t, kind.StatusSucceeded, r.Status, r.Message)
	var res struct {
		Scope  string `json:"scope"`
		Erased bool   `json:"erased"`
	}
	require.NoError(t, json.Unmarshal(r.Data, &res))
	require.Equal(t, "metadata", res.Scope)
	require.False(t, res.Erased)

	r = execute(t, kc, &pluginv1.Command{Id: "cmd_x", Kind: manifest.WipeKind, NodeId: "node_a", Payload: []byte(`{"device":"/dev/null","mode":"overwrite"}`)})
	require.Equal(t, kind.StatusFailed, r.Status)
	require.Equal(t, "device-refused", r.Reason)
	require.Contains(t, r.Message, "/dev/null is not a block device")
}

// A secretRef's value reaches the plugin in memory, is used (the image
// server demands it), and appears in neither the result nor the plugin's
// log; a command without the ref is refused naming it.
func TestPluginBinary_DeployUsesASecretRefAndNeverShowsIt(t *testing.T) {
	const token = "Bearer tok-7d1c0f3e-never-in-a-log"
	dev := loopdev.New(t, 8<<20, loopdev.Options{})
	img := bytes.Repeat([]byte("bc-image"), 128<<10)
	sum := sha256.Sum256(img)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != token {
			http.Error(w, "who are you", http.StatusUnauthorized)
			return
		}
		_, _ = w.Write(img)
	}))
	defer srv.Close()
	kc, logs := start(t, testutil.BuildBinary(t, "./plugins/disk/cmd/bc-kind-disk"))
	payload := []byte(`{"url":"` + srv.URL + `/img","device":"` + dev + `","sha256":"` + hex.EncodeToString(sum[:]) + `","authorizationSecretRef":"image-token"}`)

	r := execute(t, kc, &pluginv1.Command{Id: "cmd_d", Kind: manifest.DeployKind, NodeId: "node_a", Payload: payload,
		Secrets: map[string][]byte{"image-token": []byte(token)}})
	require.Equal(t, kind.StatusSucceeded, r.Status, r.Message)
	require.NotContains(t, string(r.Data), "tok-7d1c0f3e")
	// The plugin's log reaches the host over its stderr, after the result.
	testutil.WaitFor(t, 10*time.Second, "the plugin's log line", func() bool { return strings.Contains(logs.String(), "image deployed") })
	require.NotContains(t, logs.String(), "tok-7d1c0f3e")

	r = execute(t, kc, &pluginv1.Command{Id: "cmd_e", Kind: manifest.DeployKind, NodeId: "node_a", Payload: payload})
	require.Equal(t, kind.StatusFailed, r.Status)
	require.Contains(t, r.Message, `the command carries no secretRef "image-token"`)
}

// bc-kind-disk passes the SDK's conformance harness; its long-running case
// is a deploy from a server that trickles an endless image.
func TestPluginConformance(t *testing.T) {
	dev := loopdev.New(t, 64<<20, loopdev.Options{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		buf := make([]byte, 4096)
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for {
			if _, err := w.Write(buf); err != nil {
				return
			}
			w.(http.Flusher).Flush()
			select {
			case <-r.Context().Done():
				return
			case <-tick.C:
			}
		}
	}))
	defer srv.Close()
	bin := testutil.BuildBinary(t, "./plugins/disk/cmd/bc-kind-disk")
	deploy := kindtest.Case{Kind: manifest.DeployKind, Payload: json.RawMessage(`{"url":"` + srv.URL + `/endless","device":"` + dev +
		`","sha256":"` + hex.EncodeToString(make([]byte, 32)) + `","compression":"none"}`)}
	kindtest.Run(t, bin, kindtest.Options{
		Kinds:       []string{manifest.WipeKind, manifest.DeployKind},
		LongRunning: &deploy,
		// The injected panic replaces the handler: the loop device is
		// never written.
		InjectPanic: &deploy,
	})
}
