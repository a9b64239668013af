// Package gpureset is the gpu.reset kind: reset GPUs with nvidia-smi once no
// allocation, passthrough or process uses them, and report per GPU whether
// the reset worked and whether a fresh query shows the GPU healthy. The
// provision module's remediation sends it (for RowRemapPending, once no
// allocation is live); commands.run does not accept it.
package gpureset
