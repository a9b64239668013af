package nvml

import (
	"fmt"

	"github.com/better-compute/commands/plugins/internal/gpu"
)

// The names of diag.nvml's checks, in the order they run.
const (
	CheckNVMLInit         = "nvml.init"
	CheckGPUsVisible      = "gpus.visible"
	CheckGPUsCount        = "gpus.count"
	CheckECCUncorrectable = "ecc.uncorrectable"
	CheckRowRemapPending  = "row-remap.pending"
	CheckRowRemapFailure  = "row-remap.failure"
	CheckPCIeLink         = "pcie.link"
	CheckXIDRecent        = "xid.recent"
)

// ReasonChecksFailed is diag.nvml's failure reason when a check failed.
const ReasonChecksFailed = "checks-failed"

// The statuses of a check and of a report.
const (
	StatusPass    = "pass"
	StatusFail    = "fail"
	StatusSkipped = "skipped"
)

// Report is diag.nvml's result.
type Report struct {
	// Status is pass, or fail when any check failed.
	Status string `json:"status"`
	// Checks are the checks in the order they ran.
	Checks []Check `json:"checks"`
	// CollectedAt is when the judged inventory was collected.
	CollectedAt string `json:"collectedAt,omitempty"`
}

// Check is one check's outcome. Every failing check says why, in words an
// operator can act on: which GPU, the value seen, the recommended action.
type Check struct {
	Check  string  `json:"check"`
	GPU    *GPURef `json:"gpu,omitempty"`
	Status string  `json:"status"`
	Reason string  `json:"reason"`
	Action string  `json:"action,omitempty"`
}

// GPURef names the GPU a check is about.
type GPURef struct {
	Index int    `json:"index"`
	UUID  string `json:"uuid,omitempty"`
	BusID string `json:"busId"`
}

// DiagOptions tune the checks.
type DiagOptions struct {
	// ExpectedCount is how many GPUs the node should have; 0 skips gpus.count.
	ExpectedCount int
}

// Failed returns the failing checks.
func (r Report) Failed() []Check {
	var out []Check
	for _, c := range r.Checks {
		if c.Status == StatusFail {
			out = append(out, c)
		}
	}
	return out
}

// Diagnose runs diag.nvml's checks over an inventory. It makes no NVML call
// of its own: the inventory is the evidence.
func Diagnose(inv *gpu.Inventory, opts DiagOptions) Report {
	var r Report
	if !inv.CollectedAt.IsZero() {
		r.CollectedAt = inv.CollectedAt.Format("2006-01-02T15:04:05Z07:00")
	}
	r.Checks = append(r.Checks, checkInit(inv))
	r.Checks = append(r.Checks, checkVisible(inv)...)
	r.Checks = append(r.Checks, checkCount(inv, opts.ExpectedCount))
	for i := range inv.GPUs {
		g := &inv.GPUs[i]
		r.Checks = append(r.Checks,
			checkECC(g),
			checkRemapPending(inv, g),
			checkRemapFailure(inv, g),
			checkPCIe(g),
			checkXIDs(inv, g),
		)
	}
	r.Checks = append(r.Checks, unmatchedXIDs(inv)...)
	r.Status = StatusPass
	if len(r.Failed()) > 0 {
		r.Status = StatusFail
	}
	return r
}

func ref(g *gpu.GPU) *GPURef {
	return &GPURef{Index: g.Index, UUID: g.UUID, BusID: g.BusID}
}

func plural(n int, one, many string) string {
	if n == 1 {
		return fmt.Sprintf("%d %s", n, one)
	}
	return fmt.Sprintf("%d %s", n, many)
}

// skipped builds a skipped check with the field's recorded reason.
func skipped(name string, g *gpu.GPU, field, fallback string) Check {
	why := g.SkipReason(field)
	if why == "" {
		why = "skipped: " + fallback
	}
	return Check{Check: name, GPU: ref(g), Status: StatusSkipped, Reason: why}
}
