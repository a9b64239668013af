package bmc_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/internal/bmctest"
	"github.com/better-compute/commands/internal/testutil"
	"github.com/better-compute/commands/plugins/bmc"
	"github.com/better-compute/commands/plugins/bmc/manifest"
	"github.com/better-compute/commands/plugins/internal/site"
	"github.com/better-compute/commands/sdk/kind"
	"github.com/better-compute/commands/sdk/kindtest"
)

func (s *siteEnv) pluginEnv() []string {
	return []string{site.EnvInventory + "=" + s.inventory, bmc.EnvPollInterval + "=50ms", bmc.EnvProviderTimeout + "=5s"}
}

// The real binary, started through go-plugin as bcd starts it, serves the
// three manifests and cycles a mock BMC.
func TestPluginBinary(t *testing.T) {
	bin := testutil.BuildBinary(t, "./plugins/bmc/cmd/bc-kind-bmc")
	srv := bmctest.NewRedfish(t, bmctest.RedfishOptions{Username: user, Password: password, Delay: 100 * time.Millisecond})
	s := newSite(t)
	s.addRedfish(t, "m1", srv, nil)
	p := kindtest.Start(t, bin, kindtest.Options{Env: s.pluginEnv()})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ms, err := p.Manifests(ctx)
	require.NoError(t, err)
	require.Len(t, ms, 3)
	served := map[string]string{}
	for _, m := range ms {
		served[m.Kind] = m.Digest()
	}
	for _, m := range manifest.All() {
		require.Equal(t, m.Digest(), served[m.Kind], "the plugin serves the registry's manifest of %s", m.Kind)
	}
	r, err := p.Execute(ctx, manifest.PowerKind, json.RawMessage(`{"bmc":"m1","action":"cycle"}`), nil)
	require.NoError(t, err)
	require.Equal(t, kind.StatusSucceeded, r.Status, r.Message)
	require.NotContains(t, string(r.Data), password)
	var res bmc.PowerResult
	require.NoError(t, json.Unmarshal(r.Data, &res))
	require.True(t, res.Verified)
}

// sdk/kindtest's conformance checks; the long-running command is a power
// off whose BMC applies it only after an hour, so the verification waits
// until the cancel.
func TestConformance(t *testing.T) {
	bin := testutil.BuildBinary(t, "./plugins/bmc/cmd/bc-kind-bmc")
	srv := bmctest.NewRedfish(t, bmctest.RedfishOptions{Username: user, Password: password, Delay: time.Hour})
	s := newSite(t)
	s.addRedfish(t, "m1", srv, nil)
	kindtest.Run(t, bin, kindtest.Options{
		Kinds: []string{manifest.PowerKind, manifest.BootKind, manifest.SensorsKind},
		BadPayloads: map[string]json.RawMessage{
			manifest.PowerKind:   json.RawMessage(`{"bmc":"m1","action":"explode"}`),
			manifest.BootKind:    json.RawMessage(`{"bmc":"m1","device":"floppy"}`),
			manifest.SensorsKind: json.RawMessage(`{"bmc":"m1","events":-1}`),
		},
		LongRunning: &kindtest.Case{Kind: manifest.PowerKind, Payload: json.RawMessage(`{"bmc":"m1","action":"off"}`)},
		InjectPanic: &kindtest.Case{Kind: manifest.PowerKind, Payload: json.RawMessage(`{"bmc":"m1","action":"off"}`)},
		Env:         s.pluginEnv(),
	})
}
