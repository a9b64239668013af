// Package gpuenv names the environment variables that bcd passes to the GPU
// plugins (bc-kind-nvml, bc-kind-gpureset, bc-kind-dcgm) through its
// allowlist. A name that several plugins read means the same in each, so it
// is defined here once; each plugin lists the ones it reads in its EnvVars.
package gpuenv

const (
	// NvidiaSmi is nvidia-smi's path ("nvidia-smi" on PATH by default).
	NvidiaSmi = "BCD_NVIDIA_SMI"
	// SysRoot is the root under which proc/ and sys/ are read ("/").
	SysRoot = "BCD_SYSFS_ROOT"
	// ProcRoot is where /proc is read ($BCD_SYSFS_ROOT/proc by default).
	ProcRoot = "BCD_PROC_ROOT"
	// StateDir is bcd's state directory; the XID store lives there.
	StateDir = "BCD_STATE_DIR"
	// XIDStore overrides the XID store's path.
	XIDStore = "BCD_XID_STORE"
	// ExecTimeout bounds each run of a GPU tool ("30s").
	ExecTimeout = "BCD_GPU_EXEC_TIMEOUT"
)
