// Package nvml serves the kinds inventory.refresh and diag.nvml: their
// handlers and cgo-free logic (collection through
// plugins/internal/gpu/collect, the diag.nvml checks, the settings bcd
// passes in the environment). Their manifests live in plugins/nvml/manifest,
// which the control plane's registry imports instead of this package. It
// does not import go-nvml, which needs cgo: the NVML driver lives in
// nvmldriver, which only the plugin binary links, so the checks are tested
// against plain inventories.
package nvml
