package serverconfig_test

import (
	"math"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/controlplane/server/serverconfig"
)

// gateway.shed's keys read from the file; a trigger that would shed from a
// gateway holding its share or less is refused, naming the key and a value
// that works, rather than silently replaced by the default.
func TestGatewayShedKeys(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "bc-server.yaml")
	require.NoError(t, os.WriteFile(path, []byte("gateway:\n  shed:\n    every: 5s\n    above: 1.2\n    least: 8\n    most: 100\n"), 0o600))
	cfg, err := serverconfig.LoadConfig(path)
	require.NoError(t, err)
	every, above, err := cfg.Gateway.Shed.Options()
	require.NoError(t, err)
	require.Equal(t, 5*time.Second, every)
	require.InDelta(t, 1.2, above, 1e-9)
	require.Equal(t, 8, cfg.Gateway.Shed.Least)
	require.Equal(t, 100, cfg.Gateway.Shed.Most)
	require.False(t, cfg.Gateway.Shed.Off)

	_, _, err = serverconfig.ShedConfig{}.Options()
	require.NoError(t, err, "unset: the gateway's defaults")
	_, _, err = serverconfig.ShedConfig{Above: 0.9}.Options()
	require.ErrorContains(t, err, "gateway.shed.above: 0.9")
	require.ErrorContains(t, err, "1.1")
	_, _, err = serverconfig.ShedConfig{Above: math.NaN()}.Options()
	require.ErrorContains(t, err, "gateway.shed.above")
	_, _, err = serverconfig.ShedConfig{Above: math.Inf(1)}.Options()
	require.ErrorContains(t, err, "gateway.shed.above")
	_, _, err = serverconfig.ShedConfig{Every: serverconfig.Duration(time.Millisecond)}.Options()
	require.ErrorContains(t, err, "gateway.shed.every: 1ms is too often")
	_, _, err = serverconfig.ShedConfig{Most: -1}.Options()
	require.ErrorContains(t, err, "must not be negative")
}
