package siteproxy_test

import (
	"context"
	"encoding/json"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/internal/testutil"
	"github.com/better-compute/commands/plugins/internal/site"
	"github.com/better-compute/commands/plugins/siteproxy"
	"github.com/better-compute/commands/plugins/siteproxy/manifest"
	"github.com/better-compute/commands/sdk/kind"
	"github.com/better-compute/commands/sdk/kindtest"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testutil.CleanupBuilds()
	os.Exit(code)
}

// The real binary keeps the address rules a test cannot relax: the fake
// BMC on loopback is refused, before any credential is read or byte sent.
func TestPluginBinaryRefusesLoopback(t *testing.T) {
	bin := testutil.BuildBinary(t, "./plugins/siteproxy/cmd/bc-kind-siteproxy")
	e, _ := newEnv(t, nil)
	p := kindtest.Start(t, bin, kindtest.Options{Env: []string{site.EnvInventory + "=" + e.inventory}})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ms, err := p.Manifests(ctx)
	require.NoError(t, err)
	require.Len(t, ms, 1)
	require.Equal(t, manifest.Manifest.Digest(), ms[0].Digest())
	r, err := p.Execute(ctx, manifest.KindName, json.RawMessage(`{"bmc":"m1","method":"GET","path":"/redfish/v1"}`), nil)
	require.NoError(t, err)
	require.Equal(t, kind.StatusFailed, r.Status)
	require.Equal(t, siteproxy.ReasonAddress, r.Reason)
	require.Contains(t, r.Message, "loopback")
}

func TestConformance(t *testing.T) {
	bin := testutil.BuildBinary(t, "./plugins/siteproxy/cmd/bc-kind-siteproxy")
	e, _ := newEnv(t, nil)
	kindtest.Run(t, bin, kindtest.Options{
		Kinds:       []string{manifest.KindName},
		BadPayloads: map[string]json.RawMessage{manifest.KindName: json.RawMessage(`{"bmc":"m1","method":"CONNECT","path":"/"}`)},
		Env:         []string{site.EnvInventory + "=" + e.inventory},
		CancelNotApplicable: "site.httpProxy waits only on its request to a BMC, and the real binary refuses loopback and this machine's own " +
			"addresses (DenyAddr, which no environment relaxes), so no BMC a test can serve is reachable from it; " +
			"TestCancelStopsAHangingRequest checks the handler's cancel in process against a BMC that never answers",
		InjectPanic: &kindtest.Case{Kind: manifest.KindName, Payload: json.RawMessage(`{"bmc":"m1","method":"GET","path":"/redfish/v1"}`)},
	})
}
