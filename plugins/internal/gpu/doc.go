// Package gpu holds the GPU building blocks that the GPU kinds share
// (inventory.refresh, diag.nvml, gpu.reset, diag.dcgm): the inventory types
// that bcd stores and the control plane shows, and PCI bus id normalisation,
// the key on which the kernel log, NVML, nvidia-smi and sysfs are merged.
//
// Its subpackages each do one job, once for every GPU plugin (no plugin
// imports another): toolexec runs nvidia-smi and dcgmi under a timeout that
// kills the whole process group; smi runs nvidia-smi, reads its CSV and is
// the one reading of its exit codes; inuse decides whether a GPU is in use
// (holds, passthroughs, processes) before gpu.reset or diag.dcgm touch it;
// xid reads /dev/kmsg and keeps the XID conditions of this boot; sysview
// reads the kernel's view under a (possibly fake) root; collect merges them;
// gpuenv names the environment bcd passes to the plugins; gputest holds the
// tests' fakes. Nothing here needs cgo: NVML stays in the plugin that links
// it.
package gpu
