// Package dcgm is the diag.dcgm kind: NVIDIA DCGM's diagnostic through
// dcgmi. Level 1 checks only the deployment (dcgmi and the host engine
// answer, and their versions); levels 2 to 4 load the GPUs with
// `dcgmi diag -r N -j`, after refusing gpu-busy when a GPU they would load
// is in use, and report per test per GPU. The metal module adds the kind;
// commands.run does not accept it.
package dcgm
