// Package config is bcd's configuration: a YAML file (by default
// /etc/bcd/bcd.yaml) whose every setting a command-line flag can
// override. Unknown keys are errors, so a typo never silently falls back to
// a default.
package config

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/spf13/pflag"
	"sigs.k8s.io/yaml"

	"github.com/better-compute/commands/bcd/journal"
	"github.com/better-compute/commands/bcd/lanes"
	"github.com/better-compute/commands/bcd/metrics"
	"github.com/better-compute/commands/internal/names"
	"github.com/better-compute/commands/internal/tracing"
	"github.com/better-compute/commands/sdk/kind"
)

// DefaultPath is where bcd looks for its config file.
const DefaultPath = "/etc/bcd/bcd.yaml"

// Environment variables bcd sets for every plugin, beside PluginEnv.
const (
	// EnvNVML carries NVMLSource to the GPU plugins ("mock:dgxh200").
	EnvNVML = "BCD_NVML"
	// EnvStateDir carries the state directory to plugins that keep state.
	EnvStateDir = "BCD_STATE_DIR"
	// EnvInstallDir carries installDir to daemon.upgrade.
	EnvInstallDir = "BCD_INSTALL_DIR"
	// EnvConfigFile carries the config file's path to daemon.upgrade, whose
	// self-check of a new version loads the same config.
	EnvConfigFile = "BCD_CONFIG_FILE"
)

// Config is bcd's configuration.
type Config struct {
	// NodeID is the node's id (node_…); bcd refuses commands naming another.
	NodeID string `json:"nodeId"`
	// Role is the agent role ("node", "discovery").
	Role string `json:"role"`
	// StateDir holds the journal and the node state.
	StateDir string `json:"stateDir"`
	// PluginDir holds the kind plugin binaries.
	PluginDir string `json:"pluginDir"`
	// PluginSHA256 pins plugin binaries: file name -> hex SHA-256.
	PluginSHA256 map[string]string `json:"pluginSha256,omitempty"`
	// PluginPinsFile is a JSON object (file name -> hex SHA-256) of more
	// pins, merged under PluginSHA256: an install directory's version
	// carries the pins of its own plugins there, so a new bcd comes with
	// pins that match its plugins.
	PluginPinsFile string `json:"pluginPinsFile,omitempty"`
	// InstallDir is the versioned install directory daemon.upgrade swaps
	// (versions/<v>/ and the current symlink); empty: upgrades are refused.
	InstallDir string `json:"installDir,omitempty"`
	// ConfigPath is the file the config was read from (not a setting).
	ConfigPath string `json:"-"`
	// PluginEnv is extra environment for every plugin.
	PluginEnv map[string]string `json:"pluginEnv,omitempty"`
	// PluginStartTimeout bounds one plugin start.
	PluginStartTimeout kind.Duration `json:"pluginStartTimeout,omitempty"`
	// Lanes are the worker counts per lane (0: the default 8, 4, 2).
	Lanes lanes.Sizes `json:"lanes,omitempty"`
	// LogLevel is trace, debug, info, warn or error.
	LogLevel string `json:"logLevel"`
	// LogJSON writes logs as JSON lines.
	LogJSON bool `json:"logJson,omitempty"`
	// ControlPlane is the gateway's address (host:port), for the session.
	ControlPlane string `json:"controlPlane,omitempty"`
	// NVMLSource tells the GPU plugins where NVML is: "" for the library,
	// "mock:dgxh200" for go-nvml's mock server.
	NVMLSource string `json:"nvmlSource,omitempty"`
	// ReplayHorizon is how long past not_after journal records are kept.
	ReplayHorizon kind.Duration `json:"replayHorizon,omitempty"`
	// BootIDFile is read for the boot id.
	BootIDFile string `json:"bootIdFile,omitempty"`
	// TrustAnchors are command-signing root public keys (PEM files) the
	// operator placed: a trust bundle they sign is accepted even as the
	// node's first (a node joined before signing was turned on). Without
	// them the first bundle comes at join. With them the node is never
	// open: until it holds a bundle, commands and node specs must be
	// signed by a worker key an anchor certified, and a join answer's
	// bundle must be signed by an anchor.
	TrustAnchors []string `json:"trustAnchors,omitempty"`
	// MaxClockSkew bounds the offset a Welcome's server time may apply to
	// the node's clock (5m); a larger one is refused and reported in the
	// ClockSkew condition.
	MaxClockSkew kind.Duration `json:"maxClockSkew,omitempty"`
	// MetricsListen serves Prometheus metrics on /metrics: a loopback
	// host:port (127.0.0.1:9464) or a unix socket (unix:/run/bcd/metrics.sock).
	// Empty (the default) serves none.
	MetricsListen string `json:"metricsListen,omitempty"`
	// Tracing exports each command's spans on the node (acceptance, lane
	// wait, the plugin's run) over OTLP/gRPC to tracing.otlpEndpoint, in
	// the trace the control plane started at commands.run. Off when empty.
	Tracing tracing.Config `json:"tracing,omitempty"`
}

// Default returns the configuration with every default filled in.
func Default() Config {
	return Config{
		Role:          "node",
		StateDir:      "/var/lib/bcd",
		PluginDir:     "/usr/lib/bcd/plugins",
		LogLevel:      "info",
		ReplayHorizon: kind.Duration(journal.DefaultReplayHorizon),
		BootIDFile:    "/proc/sys/kernel/random/boot_id",
	}
}

// Parse reads a YAML document over the defaults. It uses sigs.k8s.io/yaml
// (YAML to JSON, then encoding/json), not the control plane's
// go.yaml.in/yaml/v3: the config's types are JSON-shaped (json tags,
// kind.Duration reads JSON), and operators' files have always
// been read with its YAML 1.1 scalars, which v3 reads differently.
func Parse(b []byte) (Config, error) {
	c := Default()
	if err := yaml.UnmarshalStrict(b, &c); err != nil {
		return Config{}, fmt.Errorf("config: %w", err)
	}
	return c, nil
}

// Load reads the file at path over the defaults. A missing file is an error
// unless optional is set (the default path), when it reads as the defaults.
func Load(path string, optional bool) (Config, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) && optional {
		return Default(), nil
	}
	if err != nil {
		return Config{}, fmt.Errorf("config: %w", err)
	}
	c, err := Parse(b)
	if err != nil {
		return Config{}, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

// Validate reports every problem, each naming its setting.
func (c Config) Validate() error {
	var errs []error
	// The same grammar as the control plane's (internal/names): a node id
	// or role it would refuse could never join or open a session.
	if c.NodeID == "" {
		errs = append(errs, errors.New("nodeId: required (or --node-id)"))
	} else if err := names.ID("nodeId", c.NodeID); err != nil {
		errs = append(errs, errors.New(strings.TrimPrefix(err.Error(), names.ErrInvalid.Error()+": ")))
	}
	if c.Role == "" {
		errs = append(errs, errors.New("role: required"))
	} else if err := names.Role(c.Role); err != nil {
		errs = append(errs, errors.New(strings.TrimPrefix(err.Error(), names.ErrInvalid.Error()+": ")))
	}
	if c.StateDir == "" {
		errs = append(errs, errors.New("stateDir: required"))
	}
	if c.PluginDir == "" {
		errs = append(errs, errors.New("pluginDir: required"))
	}
	if hclog.LevelFromString(c.LogLevel) == hclog.NoLevel {
		errs = append(errs, fmt.Errorf("logLevel %q: must be trace, debug, info, warn or error", c.LogLevel))
	}
	if err := c.Lanes.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("lanes: %w", err))
	}
	if c.ReplayHorizon.D() < 0 {
		errs = append(errs, errors.New("replayHorizon: must not be negative"))
	}
	if err := c.Tracing.Validate(); err != nil {
		errs = append(errs, err)
	}
	if c.MetricsListen != "" {
		if _, _, err := metrics.Parse(c.MetricsListen); err != nil {
			errs = append(errs, err)
		}
	}
	if c.MaxClockSkew.D() < 0 {
		errs = append(errs, errors.New("maxClockSkew: must not be negative"))
	}
	for i, a := range c.TrustAnchors {
		if a == "" {
			errs = append(errs, fmt.Errorf("trustAnchors[%d]: empty path", i))
		}
	}
	for name, sum := range c.PluginSHA256 {
		if len(sum) != 64 || strings.Trim(strings.ToLower(sum), "0123456789abcdef") != "" {
			errs = append(errs, fmt.Errorf("pluginSha256[%s]: must be 64 hex digits", name))
		}
		if filepath.Base(name) != name {
			errs = append(errs, fmt.Errorf("pluginSha256[%s]: must be a file name in pluginDir", name))
		}
	}
	for k := range c.PluginEnv {
		if k == "" || strings.ContainsAny(k, "= ") {
			errs = append(errs, fmt.Errorf("pluginEnv[%q]: not a variable name", k))
		}
	}
	return errors.Join(errs...)
}

// PluginEnvironment is the extra environment every plugin gets: PluginEnv,
// sorted, then the settings bcd passes on (NVML source, state directory).
func (c Config) PluginEnvironment() []string {
	keys := make([]string, 0, len(c.PluginEnv))
	for k := range c.PluginEnv {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var env []string
	for _, k := range keys {
		env = append(env, k+"="+c.PluginEnv[k])
	}
	if c.NVMLSource != "" {
		env = append(env, EnvNVML+"="+c.NVMLSource)
	}
	if c.StateDir != "" {
		env = append(env, EnvStateDir+"="+c.StateDir)
	}
	if c.InstallDir != "" {
		env = append(env, EnvInstallDir+"="+c.InstallDir)
	}
	if c.ConfigPath != "" {
		env = append(env, EnvConfigFile+"="+c.ConfigPath)
	}
	return env
}

// Flags are the command-line overrides. Register them, parse, then Apply
// them over the loaded file: only the flags given on the command line win.
type Flags struct {
	fs *pflag.FlagSet

	Path         string
	nodeID       string
	role         string
	stateDir     string
	pluginDir    string
	logLevel     string
	logJSON      bool
	controlPlane string
	nvml         string
	replay       time.Duration
	control      int
	provision    int
	bulk         int
	pluginSHA256 []string
	pluginEnv    []string
	startTimeout time.Duration
	bootIDFile   string
	trustAnchors []string
	maxClockSkew time.Duration
	pinsFile     string
	installDir   string
}

// RegisterFlags adds the config flags to fs.
func RegisterFlags(fs *pflag.FlagSet) *Flags {
	f := &Flags{fs: fs}
	fs.StringVarP(&f.Path, "config", "c", DefaultPath, "config file (YAML)")
	fs.StringVar(&f.nodeID, "node-id", "", "node id (nodeId)")
	fs.StringVar(&f.role, "role", "", "agent role: node, discovery or site (role)")
	fs.StringVar(&f.stateDir, "state-dir", "", "state directory: journal, node state (stateDir)")
	fs.StringVar(&f.pluginDir, "plugins", "", "plugin directory (pluginDir)")
	fs.StringVar(&f.logLevel, "log-level", "", "trace, debug, info, warn, error (logLevel)")
	fs.BoolVar(&f.logJSON, "log-json", false, "log JSON lines (logJson)")
	fs.StringVar(&f.controlPlane, "control-plane", "", "gateway address host:port (controlPlane)")
	fs.StringVar(&f.nvml, "nvml", "", `NVML source for the GPU plugins, e.g. "mock:dgxh200" (nvmlSource)`)
	fs.DurationVar(&f.replay, "replay-horizon", 0, "keep journal records this long past not_after (replayHorizon)")
	fs.IntVar(&f.control, "lane-control", 0, "control lane workers (lanes.control)")
	fs.IntVar(&f.provision, "lane-provision", 0, "provision lane workers (lanes.provision)")
	fs.IntVar(&f.bulk, "lane-bulk", 0, "bulk lane workers (lanes.bulk)")
	fs.StringArrayVar(&f.pluginSHA256, "plugin-sha256", nil, "pin a plugin: NAME=HEX (pluginSha256), repeatable")
	fs.StringArrayVar(&f.pluginEnv, "plugin-env", nil, "environment for plugins: KEY=VALUE (pluginEnv), repeatable")
	fs.DurationVar(&f.startTimeout, "plugin-start-timeout", 0, "bound one plugin start (pluginStartTimeout)")
	fs.StringVar(&f.bootIDFile, "boot-id-file", "", "file holding the boot id (bootIdFile)")
	fs.StringArrayVar(&f.trustAnchors, "trust-anchor", nil, "a command-signing root public key file (trustAnchors), repeatable")
	fs.DurationVar(&f.maxClockSkew, "max-clock-skew", 0, "the largest offset a Welcome's server time may apply once commands are signed (maxClockSkew)")
	fs.StringVar(&f.pinsFile, "plugin-pins-file", "", "a JSON file of more plugin pins, name -> hex SHA-256 (pluginPinsFile)")
	fs.StringVar(&f.installDir, "install-dir", "", "versioned install directory daemon.upgrade swaps (installDir)")
	return f
}

// Load reads the config file the flags name (the default path may be
// missing) and applies the flags over it.
func (f *Flags) Load() (Config, error) {
	c, err := Load(f.Path, !f.fs.Changed("config"))
	if err != nil {
		return Config{}, err
	}
	if err := f.Apply(&c); err != nil {
		return Config{}, err
	}
	if abs, err := filepath.Abs(f.Path); err == nil && (f.fs.Changed("config") || fileExists(abs)) {
		c.ConfigPath = abs
	}
	if err := c.loadPins(); err != nil {
		return Config{}, err
	}
	return c, nil
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// loadPins merges PluginPinsFile under PluginSHA256: a pin in the config
// or on the command line wins over the file's.
func (c *Config) loadPins() error {
	if c.PluginPinsFile == "" {
		return nil
	}
	b, err := os.ReadFile(c.PluginPinsFile)
	if err != nil {
		return fmt.Errorf("pluginPinsFile: %w", err)
	}
	var pins map[string]string
	if err := json.Unmarshal(b, &pins); err != nil {
		return fmt.Errorf("pluginPinsFile %s: not a JSON object of file name to hex SHA-256: %w", c.PluginPinsFile, err)
	}
	if c.PluginSHA256 == nil {
		c.PluginSHA256 = map[string]string{}
	}
	for k, v := range pins {
		if _, ok := c.PluginSHA256[k]; !ok {
			c.PluginSHA256[k] = v
		}
	}
	return nil
}

// Apply writes the flags given on the command line over c.
func (f *Flags) Apply(c *Config) error {
	set := func(name string, apply func()) {
		if f.fs.Changed(name) {
			apply()
		}
	}
	set("node-id", func() { c.NodeID = f.nodeID })
	set("role", func() { c.Role = f.role })
	set("state-dir", func() { c.StateDir = f.stateDir })
	set("plugins", func() { c.PluginDir = f.pluginDir })
	set("log-level", func() { c.LogLevel = f.logLevel })
	set("log-json", func() { c.LogJSON = f.logJSON })
	set("control-plane", func() { c.ControlPlane = f.controlPlane })
	set("nvml", func() { c.NVMLSource = f.nvml })
	set("replay-horizon", func() { c.ReplayHorizon = kind.Duration(f.replay) })
	set("lane-control", func() { c.Lanes.Control = f.control })
	set("lane-provision", func() { c.Lanes.Provision = f.provision })
	set("lane-bulk", func() { c.Lanes.Bulk = f.bulk })
	set("plugin-start-timeout", func() { c.PluginStartTimeout = kind.Duration(f.startTimeout) })
	set("boot-id-file", func() { c.BootIDFile = f.bootIDFile })
	set("trust-anchor", func() { c.TrustAnchors = append([]string(nil), f.trustAnchors...) })
	set("max-clock-skew", func() { c.MaxClockSkew = kind.Duration(f.maxClockSkew) })
	set("plugin-pins-file", func() { c.PluginPinsFile = f.pinsFile })
	set("install-dir", func() { c.InstallDir = f.installDir })
	var errs []error
	pairs := func(flag string, vals []string, into *map[string]string) {
		for _, v := range vals {
			k, val, ok := strings.Cut(v, "=")
			if !ok || k == "" {
				errs = append(errs, fmt.Errorf("--%s %q: want KEY=VALUE", flag, v))
				continue
			}
			if *into == nil {
				*into = map[string]string{}
			}
			(*into)[k] = val
		}
	}
	pairs("plugin-sha256", f.pluginSHA256, &c.PluginSHA256)
	pairs("plugin-env", f.pluginEnv, &c.PluginEnv)
	return errors.Join(errs...)
}
