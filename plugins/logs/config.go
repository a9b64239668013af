package logs

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// Environment variables that configure bc-kind-logs; tests point them at
// fake executables and files.
const (
	// EnvJournalctl is the journalctl executable.
	EnvJournalctl = "BCD_JOURNALCTL"
	// EnvKmsgPath is the kernel log (/dev/kmsg), as the GPU kinds name it.
	EnvKmsgPath = "BCD_KMSG_PATH"
	// EnvUnits lists bcd's own units, comma-separated (bcd.service).
	EnvUnits = "BCD_LOGS_UNITS"
	// EnvExecTimeout bounds each journalctl run ("2m").
	EnvExecTimeout = "BCD_LOGS_EXEC_TIMEOUT"
	// EnvTempDir is where the bundle is assembled.
	EnvTempDir = "BCD_LOGS_TMPDIR"
	// EnvMaxRawBytes bounds what one source may take on disk before its
	// oldest bytes are dropped while collecting.
	EnvMaxRawBytes = "BCD_LOGS_MAX_RAW_BYTES"
)

// Defaults.
const (
	DefaultJournalctl  = "journalctl"
	DefaultKmsgPath    = "/dev/kmsg"
	DefaultExecTimeout = 2 * time.Minute
	DefaultWindow      = 24 * time.Hour
	// MaxWindow bounds the window a payload may ask for.
	MaxWindow = 31 * 24 * time.Hour
	// DefaultMaxRawBytes is 2 GiB per source.
	DefaultMaxRawBytes int64 = 2 << 30
	// JournalRecords is how many of bcd's journal records a bundle carries.
	JournalRecords = 1000
)

// Config configures the collector.
type Config struct {
	Journalctl  string
	KmsgPath    string
	Units       []string // bcd's own units, always collected
	ExecTimeout time.Duration
	TempDir     string
	MaxRawBytes int64
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// DefaultUnits are bcd's own units: its plugins log through bcd's stderr, so
// their lines are in bcd.service's journal too.
var DefaultUnits = []string{"bcd.service"}

// ConfigFromEnv reads the environment, naming a bad value.
func ConfigFromEnv() (Config, error) {
	c := Config{
		Journalctl:  envOr(EnvJournalctl, DefaultJournalctl),
		KmsgPath:    envOr(EnvKmsgPath, DefaultKmsgPath),
		Units:       DefaultUnits,
		ExecTimeout: DefaultExecTimeout,
		TempDir:     os.Getenv(EnvTempDir),
		MaxRawBytes: DefaultMaxRawBytes,
	}
	if v := os.Getenv(EnvUnits); v != "" {
		c.Units = nil
		for _, u := range strings.Split(v, ",") {
			if u = strings.TrimSpace(u); u != "" {
				c.Units = append(c.Units, u)
			}
		}
	}
	if v := os.Getenv(EnvExecTimeout); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return c, fmt.Errorf("%s=%q: must be a positive duration such as 2m", EnvExecTimeout, v)
		}
		c.ExecTimeout = d
	}
	if v := os.Getenv(EnvMaxRawBytes); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 1<<20 {
			return c, fmt.Errorf("%s=%q: must be a byte count of at least 1 MiB", EnvMaxRawBytes, v)
		}
		c.MaxRawBytes = n
	}
	return c, nil
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func (c Config) withDefaults() Config {
	if c.Journalctl == "" {
		c.Journalctl = DefaultJournalctl
	}
	if c.KmsgPath == "" {
		c.KmsgPath = DefaultKmsgPath
	}
	if c.ExecTimeout <= 0 {
		c.ExecTimeout = DefaultExecTimeout
	}
	if c.MaxRawBytes <= 0 {
		c.MaxRawBytes = DefaultMaxRawBytes
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}
