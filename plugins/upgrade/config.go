package upgrade

import (
	"os"
	"strconv"
	"time"
)

// Environment the plugin reads; bcd sets the first three (bcd/config).
const (
	EnvStateDir   = "BCD_STATE_DIR"
	EnvInstallDir = "BCD_INSTALL_DIR"
	EnvConfigFile = "BCD_CONFIG_FILE"
	// EnvBusAddress points the plugin and the helper at a D-Bus other than
	// the system bus; tests set it to a private dbus-daemon.
	EnvBusAddress = "BCD_SYSTEM_BUS_ADDRESS"
	// EnvUnit names bcd's own unit (bcd.service).
	EnvUnit = "BCD_UNIT"
	// EnvReserveBytes is the free space to leave on the install
	// directory's file system beyond what the upgrade needs (64 MiB).
	EnvReserveBytes = "BCD_UPGRADE_RESERVE_BYTES"
)

// Defaults.
const (
	DefaultUnit          = "bcd.service"
	DefaultReserveBytes  = 64 << 20
	DefaultRejoinWindow  = 5 * time.Minute
	DefaultSelfCheckTime = 2 * time.Minute
	// MaxPackageBytes caps a package, whatever the payload says.
	MaxPackageBytes = 2 << 30
)

// Config is where the plugin finds the node's state and install directory.
type Config struct {
	StateDir     string
	InstallDir   string
	ConfigFile   string
	BusAddress   string
	Unit         string
	ReserveBytes int64
	// SelfCheckTimeout bounds the staged bcd's self-check.
	SelfCheckTimeout time.Duration
	// Now is the clock; time.Now when nil.
	Now func() time.Time
}

// ConfigFromEnv reads the environment bcd gives the plugin.
func ConfigFromEnv() Config {
	c := Config{
		StateDir: os.Getenv(EnvStateDir), InstallDir: os.Getenv(EnvInstallDir), ConfigFile: os.Getenv(EnvConfigFile),
		BusAddress: os.Getenv(EnvBusAddress), Unit: os.Getenv(EnvUnit), ReserveBytes: DefaultReserveBytes,
	}
	if v, err := strconv.ParseInt(os.Getenv(EnvReserveBytes), 10, 64); err == nil && v >= 0 {
		c.ReserveBytes = v
	}
	return c
}

func (c Config) unit() string {
	if c.Unit == "" {
		return DefaultUnit
	}
	return c.Unit
}

func (c Config) now() time.Time {
	if c.Now == nil {
		return time.Now()
	}
	return c.Now()
}
