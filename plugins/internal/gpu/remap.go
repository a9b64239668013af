package gpu

import "strings"

// remapInMIG starts the skip reason RemapUnknownInMIG builds.
const remapInMIG = "unknown while MIG mode is on: "

// RemapUnknownInMIG is why the row-remapping state of a GPU in MIG mode is
// unknown, for GPU.Skip: NVML does not report the remapped rows of a GPU
// with active MIG instances (nvidia-smi, which reads them from NVML, prints
// N/A), although the GPU (A100, H100, H200, ...) remaps rows in MIG mode
// too, so "not available on this GPU" would be wrong. answer is what the
// source said ("NVML reports NOT_SUPPORTED").
func RemapUnknownInMIG(answer string) string {
	return remapInMIG + "the driver does not report row remapping of a GPU with active MIG instances (" + answer + "), although the GPU remaps rows"
}

// IsRemapUnknownInMIG reports whether a skip reason is RemapUnknownInMIG's,
// so that diag.nvml can tell an operator how to read the state after all.
func IsRemapUnknownInMIG(reason string) bool {
	return strings.HasPrefix(strings.TrimPrefix(reason, "skipped: "), remapInMIG)
}

// MIGEnabled reports whether the GPU's MIG mode is on.
func (g *GPU) MIGEnabled() bool { return g.MIG != nil && g.MIG.Enabled }
