package upgrade_test

import (
	"encoding/json"
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/internal/testutil"
	"github.com/better-compute/commands/plugins/upgrade"
	"github.com/better-compute/commands/plugins/upgrade/manifest"
	"github.com/better-compute/commands/sdk/kindtest"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testutil.CleanupBuilds()
	os.Exit(code)
}

// bc-kind-upgrade passes the SDK's conformance harness. Its long-running
// command is a signed upgrade whose package server sends a few bytes every
// 10 ms and never the whole package: the download runs until cancelled,
// and nothing is staged or activated.
func TestConformance(t *testing.T) {
	f := newFixture(t)
	f.pkg = make([]byte, 1<<20)
	f.served = func(w http.ResponseWriter) {
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for range tick.C {
			if _, err := w.Write([]byte("slow package bytes")); err != nil {
				return
			}
			w.(http.Flusher).Flush()
		}
	}
	raw, err := json.Marshal(f.payload(t, "2.0.0", f.release, nil))
	require.NoError(t, err)
	upgradeCase := kindtest.Case{Kind: manifest.KindName, Payload: raw}
	bin := testutil.BuildBinary(t, "./plugins/upgrade/cmd/bc-kind-upgrade")
	kindtest.Run(t, bin, kindtest.Options{
		Kinds: []string{manifest.KindName},
		Env: []string{
			upgrade.EnvStateDir + "=" + f.cfg.StateDir,
			upgrade.EnvInstallDir + "=" + f.cfg.InstallDir,
			upgrade.EnvBusAddress + "=" + f.cfg.BusAddress,
			// The test's temporary file system may be small; the download
			// never completes, so no space is needed beyond the package.
			upgrade.EnvReserveBytes + "=0",
		},
		LongRunning: &upgradeCase,
		InjectPanic: &upgradeCase,
	})
	current, err := f.layout.CurrentVersion()
	require.NoError(t, err)
	require.Equal(t, "1.0.0", current, "a cancelled upgrade activates nothing")
}
