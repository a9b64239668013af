// Package gpu holds the GPU building blocks that the GPU kinds share
// (inventory.refresh, diag.nvml, gpu.reset, diag.dcgm): the inventory types
// that bcd stores and the control plane shows, and PCI bus id normalisation,
// the key on which the kernel log, NVML, nvidia-smi and sysfs are merged.
//
// Its subpackages each do one job: toolexec runs nvidia-smi and dcgmi under a
// timeout that kills the whole process group, smi parses nvidia-smi's CSV,
// xid reads /dev/kmsg and keeps the XID conditions of this boot, sysview reads
// the kernel's view under a (possibly fake) root, and collect merges them.
// Nothing here needs cgo: NVML stays in the plugin that links it.
package gpu
