package nvml

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/better-compute/commands/plugins/internal/gpu/gpuenv"
	"github.com/better-compute/commands/plugins/internal/gpu/smi"
	"github.com/better-compute/commands/plugins/internal/gpu/toolexec"
	"github.com/better-compute/commands/plugins/internal/gpu/xid"
)

// The environment variables the plugin reads; bcd passes them through its
// allowlist from its configuration.
const (
	// EnvNVML selects the NVML source: "" or "nvml" (the real library),
	// "nvml:/path/libnvidia-ml.so.1", "mock:dgxh200" (or dgxa100, dgxh100,
	// dgxb200), or "none".
	EnvNVML = "BCD_NVML"
	// EnvNVMLFaults injects faults into a mock source:
	// "gpu=3:row-remap-pending,gpu=5:ecc-uncorrectable=2".
	EnvNVMLFaults = "BCD_NVML_FAULTS"
	// EnvNVMLMockState keeps a mock source's GPUs in a file that every
	// process on the node shares (nvmldriver.MockFile): the faults seed it,
	// and a reset through the mock nvidia-smi (plugins/nvml/mocksmi)
	// clears a fault there, for the next inventory to see.
	EnvNVMLMockState = "BCD_NVML_MOCK_STATE"
	// EnvNvidiaSmi is nvidia-smi's path ("nvidia-smi" on PATH by default);
	// "mock" answers from the mock NVML source in this plugin only (gpu.reset
	// and diag.dcgm execute the path: give them the mock nvidia-smi
	// executable, internal/tools/mocknvidiasmi, instead).
	EnvNvidiaSmi = gpuenv.NvidiaSmi
	// EnvKmsgPath is the kernel log (/dev/kmsg).
	EnvKmsgPath = "BCD_KMSG_PATH"
	// EnvSysRoot is the root under which proc/ and sys/ are read ("/").
	EnvSysRoot = gpuenv.SysRoot
	// EnvStateDir is bcd's state directory; the XID store lives there.
	EnvStateDir = gpuenv.StateDir
	// EnvXIDStore overrides the XID store's path.
	EnvXIDStore = gpuenv.XIDStore
	// EnvXIDIgnore is the XID ignore list ("13,31,43,45,68,109" by default,
	// "none" for none).
	EnvXIDIgnore = "BCD_XID_IGNORE"
	// EnvExecTimeout bounds each nvidia-smi run ("30s").
	EnvExecTimeout = gpuenv.ExecTimeout
	// EnvExpectedGPUs is the node's expected GPU count for gpus.count.
	EnvExpectedGPUs = "BCD_EXPECTED_GPUS"
)

// EnvVars lists every variable the plugin reads, for bcd's allowlist.
var EnvVars = []string{EnvNVML, EnvNVMLFaults, EnvNVMLMockState, EnvNvidiaSmi, EnvKmsgPath, EnvSysRoot, EnvStateDir, EnvXIDStore, EnvXIDIgnore, EnvExecTimeout, EnvExpectedGPUs}

// MockSmi is the EnvNvidiaSmi value that answers from the mock NVML source.
const MockSmi = "mock"

// Config is the plugin's settings.
type Config struct {
	NVMLSource   string
	NVMLFaults   string
	NVMLState    string
	NvidiaSmi    string
	KmsgPath     string
	SysRoot      string
	XIDStore     string
	Ignore       xid.Ignore
	ExecTimeout  time.Duration
	ExpectedGPUs int
}

// ConfigFromEnv reads the settings with getenv (os.Getenv). It fails, naming
// the variable, on a value it cannot read.
func ConfigFromEnv(getenv func(string) string) (Config, error) {
	c := Config{
		NVMLSource: strings.TrimSpace(getenv(EnvNVML)),
		NVMLFaults: strings.TrimSpace(getenv(EnvNVMLFaults)),
		NVMLState:  strings.TrimSpace(getenv(EnvNVMLMockState)),
		NvidiaSmi:  strings.TrimSpace(getenv(EnvNvidiaSmi)),
		KmsgPath:   strings.TrimSpace(getenv(EnvKmsgPath)),
		SysRoot:    strings.TrimSpace(getenv(EnvSysRoot)),
		XIDStore:   strings.TrimSpace(getenv(EnvXIDStore)),
	}
	if c.NvidiaSmi == "" {
		c.NvidiaSmi = smi.DefaultPath
	}
	if c.KmsgPath == "" {
		c.KmsgPath = xid.DefaultKmsgPath
	}
	if c.SysRoot == "" {
		c.SysRoot = "/"
	}
	if c.XIDStore == "" {
		if dir := strings.TrimSpace(getenv(EnvStateDir)); dir != "" {
			c.XIDStore = filepath.Join(dir, xid.StoreFile)
		}
	}
	ig, err := xid.ParseIgnore(getenv(EnvXIDIgnore))
	if err != nil {
		return c, fmt.Errorf("%s: %w", EnvXIDIgnore, err)
	}
	c.Ignore = ig
	c.ExecTimeout = toolexec.DefaultTimeout
	if s := strings.TrimSpace(getenv(EnvExecTimeout)); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d <= 0 {
			return c, fmt.Errorf("%s: %q is not a positive duration such as 30s", EnvExecTimeout, s)
		}
		c.ExecTimeout = d
	}
	if s := strings.TrimSpace(getenv(EnvExpectedGPUs)); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 {
			return c, fmt.Errorf("%s: %q is not a GPU count", EnvExpectedGPUs, s)
		}
		c.ExpectedGPUs = n
	}
	return c, nil
}
