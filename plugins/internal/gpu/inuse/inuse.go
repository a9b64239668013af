// Package inuse decides whether a GPU is in use, the check gpu.reset and
// diag.dcgm (from level 2) make before they touch a GPU: a live hold in the
// applied node spec, a passthrough to an instance, a process with a compute
// context on it, or a process holding its device node open.
package inuse

import (
	"fmt"
	"github.com/better-compute/commands/sdk/kind"
	"strings"

	"github.com/better-compute/commands/plugins/internal/gpu/smi"
	"github.com/better-compute/commands/sdk/nodespec"
)

// The failure reasons of the in-use check, which gpu.reset and diag.dcgm
// report as theirs.
const (
	// ReasonGPUBusy: a GPU the command would touch is in use.
	ReasonGPUBusy = kind.ReasonGPUBusy
	// ReasonNodeSpec: the applied node spec could not be read, so a live
	// hold cannot be ruled out.
	ReasonNodeSpec = "node-spec-unavailable"
	// ReasonSmiFailed: nvidia-smi did not answer the queries the check
	// needs (the GPU list, the compute processes).
	ReasonSmiFailed = "nvidia-smi-failed"
)

// Input is what is known of the node when the check runs.
type Input struct {
	// Spec is the applied node spec, with its holds and instances.
	Spec nodespec.Spec
	// Apps are the compute processes nvidia-smi reports.
	Apps []smi.ComputeApp
	// Holders are the processes with a GPU device node open.
	Holders []Holder
}

// Reasons returns why each of gpus is in use, one line per finding in the
// spec's words ("<uuid> has a live assignment", "<uuid> is passed through to
// <instance>") or naming the process; nil when none is. The spec is consulted
// first: it says why in terms an operator can act on.
func Reasons(in Input, gpus []string) []string {
	var out []string
	seen := map[string]bool{}
	add := func(r string) {
		if !seen[r] {
			seen[r] = true
			out = append(out, r)
		}
	}
	for _, g := range gpus {
		if r := in.Spec.BusyReason(g); r != "" {
			add(r)
			continue
		}
		if r := migOrSlotHold(in.Spec, g); r != "" {
			add(r)
			continue
		}
		for _, a := range in.Apps {
			if strings.EqualFold(a.GPU, g) {
				add(fmt.Sprintf("%s is used by process %d", g, a.PID))
			}
		}
		for _, h := range in.Holders {
			if strings.EqualFold(h.GPU, g) {
				add(fmt.Sprintf("%s is held open by process %d (%s)", g, h.PID, h.Comm))
			}
		}
	}
	return out
}

// migOrSlotHold catches a live hold whose gpu field names a MIG device of
// the GPU rather than the GPU itself ("MIG-<gpu uuid>/…", the form older
// drivers print): the spec requires the physical UUID, but a hold that slips
// through must still keep a reset off the GPU.
func migOrSlotHold(s nodespec.Spec, gpu string) string {
	bare := strings.TrimPrefix(strings.ToLower(gpu), "gpu-")
	for _, h := range s.Holds {
		if h.State != nodespec.HoldLive {
			continue
		}
		for _, name := range []string{h.GPU, h.MIG} {
			n := strings.ToLower(name)
			if strings.HasPrefix(n, "mig-gpu-"+bare+"/") || strings.HasPrefix(n, "mig-"+bare+"/") {
				return gpu + " has a live assignment"
			}
		}
	}
	return ""
}
