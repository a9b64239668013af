package nvml

import (
	"fmt"

	"github.com/better-compute/commands/plugins/internal/gpu"
)

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
