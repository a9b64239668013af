package logs_test

import (
	"context"
	"encoding/json"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/controlplane/commands/bundles"
	"github.com/better-compute/commands/internal/testutil"
	"github.com/better-compute/commands/plugins/logs"
	"github.com/better-compute/commands/plugins/logs/manifest"
	"github.com/better-compute/commands/sdk/kind"
	"github.com/better-compute/commands/sdk/kindtest"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testutil.CleanupBuilds()
	os.Exit(code)
}

func (e *env) pluginEnv() []string {
	return []string{
		logs.EnvJournalctl + "=" + e.cfg.Journalctl,
		logs.EnvKmsgPath + "=" + e.cfg.KmsgPath,
		logs.EnvExecTimeout + "=60s",
	}
}

// The real bc-kind-logs binary passes the SDK's conformance checks, a
// collection stuck in journalctl among them (cancelled mid-run), and
// collects through bcd's Host service over go-plugin's broker.
func TestPluginBinaryOutOfProcess(t *testing.T) {
	e := setup(t, 20)
	bin := testutil.BuildBinary(t, "./plugins/logs/cmd/bc-kind-logs")
	hang := e.presign(t, "logs-hang", 1<<20)
	hangPayload, err := json.Marshal(map[string]any{"uploadUrl": hang.UploadURL, "maxBytes": hang.MaxBytes, "units": []string{"hang.service"}})
	require.NoError(t, err)
	kindtest.Run(t, bin, kindtest.Options{
		Kinds:       []string{manifest.KindName},
		Host:        fakeHost{},
		Env:         e.pluginEnv(),
		LongRunning: &kindtest.Case{Kind: manifest.KindName, Payload: hangPayload},
		InjectPanic: &kindtest.Case{Kind: manifest.KindName, Payload: hangPayload},
	})

	p := kindtest.Start(t, bin, kindtest.Options{Host: fakeHost{}, Env: e.pluginEnv()})
	key := bundles.SupportBundleKey("node_1", "logs-oop")
	f := e.presign(t, "logs-oop", 1<<20)
	raw, err := json.Marshal(payload(f, key))
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r, err := p.Execute(ctx, manifest.KindName, raw, nil)
	require.NoError(t, err)
	require.Equal(t, kind.StatusSucceeded, r.Status, r.Message)
	var res logs.Result
	require.NoError(t, json.Unmarshal(r.Data, &res))
	_, err = bundles.New(e.store, 1<<20).Check(ctx, key, res.SHA256)
	require.NoError(t, err)
	rc, _, err := e.store.Open(ctx, key)
	require.NoError(t, err)
	defer rc.Close()
	files, _ := untar(t, rc)
	require.Contains(t, files["gpu/inventory.json"], "GPU-1", "the inventory came from bcd's Host service")
	require.Contains(t, files["bcd/journal.jsonl"], "cmd_1")
}
