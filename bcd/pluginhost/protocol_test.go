package pluginhost_test

import (
	"encoding/json"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/bcd/pluginhost"
	"github.com/better-compute/commands/internal/testplugins"
	"github.com/better-compute/commands/sdk/kind"
	"github.com/better-compute/commands/sdk/wire"
)

// "A plugin built on this SDK release keeps working with a later bcd": a
// plugin that speaks only protocol 1, with the handshake plugins had before
// versions were negotiated, loads and runs beside a current one, each at
// the version it knows.
func TestHost_APluginOfTheOlderProtocolAndACurrentOneBothServe(t *testing.T) {
	f := newFixture(t)
	install(t, f.dir, testplugins.Legacy, "bc-kind-legacy")
	install(t, f.dir, examplePkg, "bc-kind-example")
	h := mustStart(t, f, nil)

	byName := map[string]pluginhost.Plugin{}
	for _, p := range h.Plugins() {
		byName[p.Name] = p
	}
	require.Equal(t, wire.ProtocolVersion1, byName["bc-kind-legacy"].Protocol)
	require.Empty(t, byName["bc-kind-legacy"].Capabilities, "protocol 1 has no capabilities")
	require.Equal(t, []string{"legacy.echo"}, byName["bc-kind-legacy"].Kinds)
	require.Equal(t, wire.ProtocolVersion2, byName["bc-kind-example"].Protocol)
	require.Contains(t, byName["bc-kind-example"].Capabilities, wire.CapabilityProgressAfterCancel)
	require.Equal(t, kind.SDKVersion, byName["bc-kind-example"].SDKVersion)

	var mu sync.Mutex
	var steps []string
	res, err := h.Execute(t.Context(), kind.Command{ID: "cmd_legacy", Kind: "legacy.echo", Payload: json.RawMessage(`{"message":"old"}`)},
		func(_ int, message string) {
			mu.Lock()
			defer mu.Unlock()
			steps = append(steps, message)
		})
	require.NoError(t, err)
	require.Equal(t, kind.StatusSucceeded, res.Status, res.Message)
	require.JSONEq(t, `{"message":"old","protocol":"1"}`, string(res.Data))
	mu.Lock()
	require.Equal(t, []string{"legacy step"}, steps)
	mu.Unlock()

	res, err = execute(t, h, "example.echo", `{"message":"new"}`)
	require.NoError(t, err)
	require.Equal(t, kind.StatusSucceeded, res.Status, res.Message)
	require.Contains(t, f.logs.String(), "protocol=1")
	require.Contains(t, f.logs.String(), "protocol=2")
}

// A plugin that speaks only a protocol this bcd does not know is refused,
// naming the versions, and the others still load.
func TestHost_APluginOfAnUnknownProtocolIsRefused(t *testing.T) {
	f := newFixture(t)
	f.cfg.Env = []string{"BCD_TEST_LEGACY_PROTOCOL=99"}
	install(t, f.dir, testplugins.Legacy, "bc-kind-future")
	install(t, f.dir, examplePkg, "bc-kind-example")
	h, err := f.start(t, nil)
	require.ErrorIs(t, err, pluginhost.ErrRefused)
	require.Contains(t, err.Error(), "bc-kind-future")
	require.Contains(t, err.Error(), "Plugin version: 99")
	_, ok := h.Manifest("legacy.echo")
	require.False(t, ok)
	_, ok = h.Manifest("example.echo")
	require.True(t, ok)
	require.Len(t, h.Refused(), 1)
	require.Equal(t, "bc-kind-future", h.Refused()[0].Plugin)
}
