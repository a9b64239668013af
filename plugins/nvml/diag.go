package nvml

import (
	"fmt"
	"sort"
	"strings"

	"github.com/better-compute/commands/plugins/internal/gpu"
	"github.com/better-compute/commands/plugins/internal/gpu/smi"
	"github.com/better-compute/commands/plugins/internal/gpu/xid"
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

// checkInit passes only when nvidia-smi answered: the kernel module naming
// the GPUs proves the hardware is there, not that the management interface
// (and everything that uses it) works.
func checkInit(inv *gpu.Inventory) Check {
	c := Check{Check: CheckNVMLInit}
	smiSt, kst := inv.Sources.NvidiaSmi, inv.Sources.Kernel
	if smiSt.Answered {
		c.Status = StatusPass
		c.Reason = fmt.Sprintf("nvidia-smi answered for %s", plural(smiSt.GPUs, "GPU", "GPUs"))
		if inv.DriverVersion != "" {
			c.Reason += " (driver " + inv.DriverVersion + ")"
		}
		return c
	}
	c.Status = StatusFail
	why := smiSt.Reason
	if why == "" {
		why = "no answer"
	}
	c.Reason = "nvidia-smi did not answer: " + why
	if kst.Answered && kst.GPUs > 0 {
		c.Reason += fmt.Sprintf("; the kernel driver alone names %s, which does not prove the driver's management interface works", plural(kst.GPUs, "GPU", "GPUs"))
	}
	c.Action = initAction(smiSt)
	return c
}

func initAction(st gpu.SourceStatus) string {
	code := -1
	if st.ExitCode != nil {
		code = *st.ExitCode
	}
	switch {
	case code == smi.ExitDriverNotLoaded:
		return "load the NVIDIA kernel module (modprobe nvidia) or reinstall the driver, then run diag.nvml again"
	case code == smi.ExitNVMLMissing:
		return "install the NVIDIA user-space libraries (libnvidia-ml) that match the kernel module"
	case code == smi.ExitFallenOffBus || strings.Contains(st.Reason, "fallen off the bus"):
		return "reboot the node (power-cycle it if the GPU does not come back): a GPU that fell off the bus cannot be reset"
	case strings.Contains(st.Reason, "hung and was killed"):
		return "reboot the node: the driver or the GPU's firmware hangs (look for XID 119 in the kernel log)"
	case strings.Contains(st.Reason, "not installed"):
		return "install the NVIDIA driver utilities (nvidia-smi) on the node"
	case strings.Contains(st.Reason, "in use by another client"):
		return "stop the client holding the GPU (nv-hostengine, dcgm-exporter) and run diag.nvml again"
	default:
		return "run nvidia-smi on the node to see the error; reinstall the NVIDIA driver if its kernel module and libraries do not match"
	}
}

// managed says whether NVML or nvidia-smi lists the GPU.
func managed(g *gpu.GPU) bool { return g.SeenByAny(gpu.SourceNVML, gpu.SourceNvidiaSmi) }

func managedCount(inv *gpu.Inventory) int {
	n := 0
	for i := range inv.GPUs {
		if managed(&inv.GPUs[i]) {
			n++
		}
	}
	return n
}

func checkVisible(inv *gpu.Inventory) []Check {
	n := managedCount(inv)
	if n == 0 {
		c := Check{Check: CheckGPUsVisible, Status: StatusFail}
		c.Reason = "no GPU is visible to NVML or nvidia-smi"
		if k := inv.Sources.Kernel.GPUs; k > 0 {
			c.Reason += fmt.Sprintf(" although the kernel names %s", plural(k, "GPU", "GPUs"))
			c.Action = "fix the driver first (see nvml.init), then run diag.nvml again"
		} else {
			c.Action = "check that the GPUs are seated and powered and that the NVIDIA driver is installed"
		}
		return []Check{c}
	}
	var out []Check
	for i := range inv.GPUs {
		g := &inv.GPUs[i]
		if managed(g) {
			continue
		}
		out = append(out, Check{
			Check:  CheckGPUsVisible,
			GPU:    ref(g),
			Status: StatusFail,
			Reason: fmt.Sprintf("%s is on the PCI bus but neither NVML nor nvidia-smi lists it", g.Label()),
			Action: "look for XID 79 (fallen off the bus) in the kernel log and reboot the node; replace the GPU if it stays missing",
		})
	}
	if len(out) > 0 {
		return out
	}
	return []Check{{Check: CheckGPUsVisible, Status: StatusPass, Reason: fmt.Sprintf("%s visible to the driver", plural(n, "GPU", "GPUs"))}}
}

func checkCount(inv *gpu.Inventory, expected int) Check {
	c := Check{Check: CheckGPUsCount}
	if expected <= 0 {
		c.Status = StatusSkipped
		c.Reason = "skipped: no expected GPU count (set expectedCount in the payload or the node's expected GPU count)"
		return c
	}
	n := managedCount(inv)
	if n == expected {
		c.Status = StatusPass
		c.Reason = fmt.Sprintf("%s visible, as expected", plural(n, "GPU", "GPUs"))
		return c
	}
	c.Status = StatusFail
	c.Reason = fmt.Sprintf("%s visible; this node should have %d", plural(n, "GPU", "GPUs"), expected)
	if n < expected {
		c.Action = "find the missing GPU (compare the kernel's PCI devices with nvidia-smi -L, look for XID 79) and reboot the node or replace the GPU"
	} else {
		c.Action = "correct the node's expected GPU count, or find out why the node shows more GPUs than it should"
	}
	return c
}

// skipped builds a skipped check with the field's recorded reason.
func skipped(name string, g *gpu.GPU, field, fallback string) Check {
	why := g.SkipReason(field)
	if why == "" {
		why = "skipped: " + fallback
	}
	return Check{Check: name, GPU: ref(g), Status: StatusSkipped, Reason: why}
}

// checkECC gates on the volatile count (errors since the driver loaded); the
// aggregate count is the GPU's history and only informs.
func checkECC(g *gpu.GPU) Check {
	if g.ECC != nil && g.ECC.Enabled != nil && !*g.ECC.Enabled {
		return Check{Check: CheckECCUncorrectable, GPU: ref(g), Status: StatusSkipped, Reason: "skipped: ECC is disabled on this GPU"}
	}
	if g.ECC == nil || g.ECC.UncorrectableVolatile == nil {
		return skipped(CheckECCUncorrectable, g, gpu.FieldECCErrors, "no source reported the ECC error counts")
	}
	vol := *g.ECC.UncorrectableVolatile
	agg := ""
	if g.ECC.UncorrectableAggregate != nil {
		agg = fmt.Sprintf("; aggregate %d", *g.ECC.UncorrectableAggregate)
	}
	if vol == 0 {
		return Check{Check: CheckECCUncorrectable, GPU: ref(g), Status: StatusPass, Reason: "no uncorrectable ECC errors since the driver loaded (volatile 0" + agg + ")"}
	}
	return Check{
		Check:  CheckECCUncorrectable,
		GPU:    ref(g),
		Status: StatusFail,
		Reason: fmt.Sprintf("%s has %s since the driver loaded (volatile %d%s)", g.Label(), plural(int(vol), "uncorrectable ECC error", "uncorrectable ECC errors"), vol, agg),
		Action: "drain the GPU and reset it (gpu.reset); replace it if uncorrectable errors come back",
	}
}

func checkRemapPending(inv *gpu.Inventory, g *gpu.GPU) Check {
	if g.RemappedRows == nil {
		return remapUnreported(inv, g, CheckRowRemapPending)
	}
	rr := g.RemappedRows
	if !rr.Pending {
		return Check{Check: CheckRowRemapPending, GPU: ref(g), Status: StatusPass, Reason: fmt.Sprintf("no row remap pending (%d correctable, %d uncorrectable rows remapped)", rr.Correctable, rr.Uncorrectable)}
	}
	return Check{
		Check:  CheckRowRemapPending,
		GPU:    ref(g),
		Status: StatusFail,
		Reason: fmt.Sprintf("%s has a row remap pending, which takes effect only after a GPU reset (%d correctable, %d uncorrectable rows remapped)", g.Label(), rr.Correctable, rr.Uncorrectable),
		Action: "reset the GPU (gpu.reset) once no allocation is live",
	}
}

func checkRemapFailure(inv *gpu.Inventory, g *gpu.GPU) Check {
	if g.RemappedRows == nil {
		return remapUnreported(inv, g, CheckRowRemapFailure)
	}
	rr := g.RemappedRows
	if !rr.Failure {
		return Check{Check: CheckRowRemapFailure, GPU: ref(g), Status: StatusPass, Reason: "no row remapping failure"}
	}
	return Check{
		Check:  CheckRowRemapFailure,
		GPU:    ref(g),
		Status: StatusFail,
		Reason: fmt.Sprintf("%s failed to remap a row: a memory bank has no spare rows left (%d uncorrectable rows remapped)", g.Label(), rr.Uncorrectable),
		Action: "drain the GPU and replace it (RMA); a reset does not fix a remapping failure",
	}
}

// The kernel's row-remapping XIDs, which the row-remap checks fall back on
// when the driver does not report the state: 63, a row was marked for
// remapping (a reset activates it); 64, the row remapper failed to record
// one. They mean that only on GPUs that remap rows (Ampere and later, every
// GPU with MIG): older GPUs log 63 and 64 for page retirement, so the
// fallback is for GPUs in MIG mode only.
const (
	xidRowRemapPending = 63
	xidRowRemapFailure = 64
)

// remapUnreported judges a row-remap check of a GPU whose remapped rows no
// source reported. Outside MIG mode it is skipped with the source's reason.
// In MIG mode the driver does not report them (gpu.RemapUnknownInMIG), so
// this boot's row-remapping XIDs decide: one fails the check, none leaves it
// skipped with how to read the state.
func remapUnreported(inv *gpu.Inventory, g *gpu.GPU, name string) Check {
	c := skipped(name, g, gpu.FieldRemappedRows, "no source reported the remapped rows")
	if !g.MIGEnabled() {
		return c
	}
	want := xidRowRemapPending
	if name == CheckRowRemapFailure {
		want = xidRowRemapFailure
	}
	switch {
	case !inv.Sources.Kmsg.Answered:
		c.Reason += "; the kernel log could not be read either"
	case hasXID(g, want) && want == xidRowRemapPending:
		c.Status, c.Action = StatusFail, "reset the GPU (gpu.reset) once no allocation is live"
		c.Reason = fmt.Sprintf("%s logged XID %d this boot: a row was marked for remapping, which takes effect only after a GPU reset (the driver does not report row remapping in MIG mode)", g.Label(), want)
		return c
	case hasXID(g, want):
		c.Status, c.Action = StatusFail, "drain the GPU and reset it (gpu.reset), then destroy its MIG instances and run diag.nvml again: replace the GPU (RMA) if it reports a remapping failure"
		c.Reason = fmt.Sprintf("%s logged XID %d this boot: the row remapper failed to record a remap (the driver does not report row remapping in MIG mode)", g.Label(), want)
		return c
	default:
		c.Reason += fmt.Sprintf("; the kernel log shows no row-remapping XID (%d, %d) this boot", xidRowRemapPending, xidRowRemapFailure)
	}
	if gpu.IsRemapUnknownInMIG(c.Reason) {
		c.Action = "to read the row-remapping state, destroy the GPU's MIG instances (or disable MIG mode) once no allocation is live, then run diag.nvml again"
	}
	return c
}

// hasXID reports whether the GPU logged the XID this boot, and it is not
// on the ignore list.
func hasXID(g *gpu.GPU, xid int) bool {
	for _, c := range g.XIDs {
		if c.XID == xid && !c.Ignored {
			return true
		}
	}
	return false
}

// checkPCIe fails on a link narrower than its maximum width. Idle GPUs may
// narrow it to save power, so the narrowing must show in two samples from
// the driver, or in sysfs. Speed is reported and never judged.
func checkPCIe(g *gpu.GPU) Check {
	p := g.PCIe
	if p == nil || (p.WidthMax == 0 && p.SysfsWidthMax == 0) {
		return skipped(CheckPCIeLink, g, gpu.FieldPCIeLink, "no source reported the PCIe link width")
	}
	cur, max := p.WidthCurrent, p.WidthMax
	if max == 0 {
		cur, max = p.SysfsWidthCurrent, p.SysfsWidthMax
	}
	narrowSamples := 0
	for _, s := range p.WidthSamples {
		if s > 0 && s < p.WidthMax {
			narrowSamples++
		}
	}
	sysfsNarrow := p.SysfsWidthMax > 0 && p.SysfsWidthCurrent > 0 && p.SysfsWidthCurrent < p.SysfsWidthMax
	speed := ""
	if p.SpeedCurrent != "" {
		speed = ", " + p.SpeedCurrent
	} else if p.GenCurrent > 0 {
		speed = fmt.Sprintf(", Gen%d", p.GenCurrent)
	}
	switch {
	case narrowSamples >= 2 || sysfsNarrow:
		how := fmt.Sprintf("in %d samples from the driver", narrowSamples)
		if sysfsNarrow {
			how = fmt.Sprintf("confirmed by sysfs: x%d of x%d", p.SysfsWidthCurrent, p.SysfsWidthMax)
			if p.WidthMax == 0 || narrowSamples == 0 {
				cur, max = p.SysfsWidthCurrent, p.SysfsWidthMax
			}
		}
		return Check{
			Check:  CheckPCIeLink,
			GPU:    ref(g),
			Status: StatusFail,
			Reason: fmt.Sprintf("%s PCIe link runs at x%d of x%d lanes (%s)", g.Label(), cur, max, how),
			Action: "drain the GPU, then reseat it or check its riser and cable; a reboot retrains the link",
		}
	case narrowSamples == 1 || (cur > 0 && cur < max):
		return Check{Check: CheckPCIeLink, GPU: ref(g), Status: StatusPass, Reason: fmt.Sprintf("PCIe link at x%d of x%d in one sample only; an idle GPU may narrow its link, so this is not judged until it persists", cur, max)}
	default:
		return Check{Check: CheckPCIeLink, GPU: ref(g), Status: StatusPass, Reason: fmt.Sprintf("PCIe link at its full width, x%d%s", max, speed)}
	}
}

func checkXIDs(inv *gpu.Inventory, g *gpu.GPU) Check {
	if !inv.Sources.Kmsg.Answered {
		why := inv.Sources.Kmsg.Reason
		if why == "" {
			why = "no source"
		}
		return Check{Check: CheckXIDRecent, GPU: ref(g), Status: StatusSkipped, Reason: "skipped: the kernel log could not be read: " + why}
	}
	return judgeXIDs(CheckXIDRecent, ref(g), g.Label(), g.XIDs)
}

func judgeXIDs(name string, r *GPURef, label string, conds []gpu.XIDCondition) Check {
	var act, info, ignored []gpu.XIDCondition
	for _, c := range conds {
		switch {
		case c.Ignored:
			ignored = append(ignored, c)
		case c.Action == gpu.ActionInformation:
			info = append(info, c)
		default:
			act = append(act, c)
		}
	}
	if len(act) == 0 {
		reason := "no XID this boot that needs an action"
		if len(info) > 0 {
			reason += "; information only: " + listXIDs(info)
		}
		if len(ignored) > 0 {
			reason += "; ignored application XIDs: " + listXIDs(ignored)
		}
		return Check{Check: name, GPU: r, Status: StatusPass, Reason: reason}
	}
	worst := gpu.ActionInformation
	var worstXID gpu.XIDCondition
	for _, c := range act {
		if xid.Rank(c.Action) > xid.Rank(worst) {
			worst, worstXID = c.Action, c
		}
	}
	reason := fmt.Sprintf("%s logged %s this boot (last: XID %d: %s)", label, listXIDs(act), worstXID.XID, worstXID.Message)
	action := "reset the GPU (gpu.reset) once no allocation is live; reboot the node if the XID comes back"
	if worst == gpu.ActionReboot {
		action = fmt.Sprintf("reboot the node (power-cycle it if the GPU does not come back); a GPU reset cannot recover XID %d", worstXID.XID)
	}
	return Check{Check: name, GPU: r, Status: StatusFail, Reason: reason, Action: action}
}

func listXIDs(conds []gpu.XIDCondition) string {
	sorted := append([]gpu.XIDCondition(nil), conds...)
	sort.SliceStable(sorted, func(i, j int) bool { return sorted[i].XID < sorted[j].XID })
	parts := make([]string, 0, len(sorted))
	for _, c := range sorted {
		parts = append(parts, fmt.Sprintf("XID %d ×%d (%s)", c.XID, c.Count, c.Action))
	}
	return strings.Join(parts, ", ")
}

// unmatchedXIDs judges the XIDs of bus ids that no source lists any more.
func unmatchedXIDs(inv *gpu.Inventory) []Check {
	if !inv.Sources.Kmsg.Answered || len(inv.UnmatchedXIDs) == 0 {
		return nil
	}
	byBus := map[string][]gpu.XIDCondition{}
	var order []string
	for _, c := range inv.UnmatchedXIDs {
		if _, ok := byBus[c.BusID]; !ok {
			order = append(order, c.BusID)
		}
		byBus[c.BusID] = append(byBus[c.BusID], c)
	}
	var out []Check
	for _, bus := range order {
		r := &GPURef{Index: -1, BusID: bus}
		out = append(out, judgeXIDs(CheckXIDRecent, r, "the GPU at "+bus+" (listed by no source)", byBus[bus]))
	}
	return out
}
