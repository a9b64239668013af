package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/bcd/lanes"
)

const sample = `
nodeId: node_0412
role: node
stateDir: /var/lib/bcd
pluginDir: /usr/lib/bcd/plugins
pluginSha256:
  bc-kind-nvml: 0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef
pluginEnv:
  BCD_EXPECTED_GPUS: "8"
lanes:
  control: 16
logLevel: debug
controlPlane: gw.example.com:443
nvmlSource: mock:dgxh200
replayHorizon: 48h
`

func TestParse_FileWithDefaults(t *testing.T) {
	c, err := Parse([]byte(sample))
	require.NoError(t, err)
	require.NoError(t, c.Validate())
	require.Equal(t, "node_0412", c.NodeID)
	require.Equal(t, lanes.Sizes{Control: 16}, c.Lanes)
	require.Equal(t, 48*time.Hour, c.ReplayHorizon.D())
	require.Equal(t, "/proc/sys/kernel/random/boot_id", c.BootIDFile, "defaults stay")
	require.Equal(t, []string{"BCD_EXPECTED_GPUS=8", "BCD_NVML=mock:dgxh200", "BCD_STATE_DIR=/var/lib/bcd"}, c.PluginEnvironment())
}

func TestParse_UnknownKeyIsAnError(t *testing.T) {
	_, err := Parse([]byte("nodeId: n\nlane:\n  control: 3\n"))
	require.ErrorContains(t, err, "lane")
}

// The file is read as it always has been, through sigs.k8s.io/yaml: YAML
// 1.1 scalars (an unquoted on or yes is a boolean, and one in a string
// field reads "true") and keys matched as encoding/json matches them. The
// control plane's configs use go.yaml.in/yaml/v3, which reads these
// differently; moving this file to it would change what operators' files
// mean, so this test fails if that happens unnoticed.
func TestParse_ReadsYAML11AsBefore(t *testing.T) {
	c, err := Parse([]byte("nodeId: node_1\nlogJson: yes\npluginEnv:\n  DEBUG: on\n  MODE: 0755\n"))
	require.NoError(t, err)
	require.True(t, c.LogJSON)
	require.Equal(t, map[string]string{"DEBUG": "true", "MODE": "493"}, c.PluginEnv)
}

func TestValidate_NamesEverySetting(t *testing.T) {
	c := Default()
	c.LogLevel = "loud"
	c.Lanes.Bulk = -1
	c.PluginSHA256 = map[string]string{"../x": "nothex"}
	err := c.Validate()
	require.Error(t, err)
	for _, want := range []string{"nodeId", "logLevel", "lanes", "pluginSha256[../x]: must be 64 hex", "must be a file name"} {
		require.ErrorContains(t, err, want)
	}
}

// The node id and role follow the control plane's grammar: an id or role
// it refuses could never join or hold a session.
func TestValidate_NodeIDAndRoleFollowTheControlPlanesGrammar(t *testing.T) {
	for _, c := range []struct{ nodeID, role, want string }{
		{"node with spaces", "node", "nodeId"},
		{"node_ünïcode", "node", "nodeId"},
		{strings.Repeat("n", 5000), "node", "nodeId"},
		{"node_0412", "ROOT!", "role"},
		{"node_0412", "admin", "role"},
	} {
		cfg := Default()
		cfg.NodeID, cfg.Role = c.nodeID, c.role
		err := cfg.Validate()
		require.Error(t, err, "%q %q", c.nodeID, c.role)
		require.ErrorContains(t, err, c.want)
	}
	for _, role := range []string{"node", "discovery", "site"} {
		cfg := Default()
		cfg.NodeID, cfg.Role = "node_0412.rack-3", role
		require.NoError(t, cfg.Validate())
	}
}

func TestFlags_OverrideTheFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "bcd.yaml")
	require.NoError(t, os.WriteFile(path, []byte(sample), 0o600))
	fs := pflag.NewFlagSet("bcd", pflag.ContinueOnError)
	f := RegisterFlags(fs)
	require.NoError(t, fs.Parse([]string{"--config", path, "--node-id", "node_flag", "--lane-bulk", "3", "--plugin-env", "A=b", "--log-level", "warn",
		"--max-clock-skew", "2m", "--trust-anchor", "/etc/bcd/root.pub"}))
	c, err := f.Load()
	require.NoError(t, err)
	require.Equal(t, "node_flag", c.NodeID, "the flag wins")
	require.Equal(t, lanes.Sizes{Control: 16, Bulk: 3}, c.Lanes, "unset flags leave the file's values")
	require.Equal(t, "warn", c.LogLevel)
	require.Equal(t, "8", c.PluginEnv["BCD_EXPECTED_GPUS"])
	require.Equal(t, "b", c.PluginEnv["A"])
	require.Equal(t, "mock:dgxh200", c.NVMLSource)
	require.Equal(t, 2*time.Minute, c.MaxClockSkew.D())
	require.Equal(t, []string{"/etc/bcd/root.pub"}, c.TrustAnchors)
}

func TestFlags_MissingFiles(t *testing.T) {
	fs := pflag.NewFlagSet("bcd", pflag.ContinueOnError)
	f := RegisterFlags(fs)
	f.Path = filepath.Join(t.TempDir(), "absent.yaml") // as if the default path
	require.NoError(t, fs.Parse([]string{"--node-id", "n"}))
	c, err := f.Load()
	require.NoError(t, err, "the default path may be missing")
	require.Equal(t, "n", c.NodeID)

	fs = pflag.NewFlagSet("bcd", pflag.ContinueOnError)
	f = RegisterFlags(fs)
	require.NoError(t, fs.Parse([]string{"--config", filepath.Join(t.TempDir(), "absent.yaml")}))
	_, err = f.Load()
	require.Error(t, err, "a named config file must exist")

	fs = pflag.NewFlagSet("bcd", pflag.ContinueOnError)
	f = RegisterFlags(fs)
	require.NoError(t, fs.Parse([]string{"--plugin-env", "novalue"}))
	f.Path = filepath.Join(t.TempDir(), "absent.yaml")
	_, err = f.Load()
	require.ErrorContains(t, err, "KEY=VALUE")
}

// FuzzParse: any bytes either parse into a config or fail with an error,
// never a panic.
func FuzzParse(f *testing.F) {
	f.Add([]byte(sample))
	f.Add([]byte("nodeId: [1, 2"))
	f.Add([]byte("lanes: {control: -4}\nreplayHorizon: 3x"))
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := Parse(b)
		if err == nil {
			_ = c.Validate()
			_ = c.PluginEnvironment()
		}
	})
}
