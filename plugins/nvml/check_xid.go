package nvml

import (
	"fmt"
	"sort"
	"strings"

	"github.com/better-compute/commands/plugins/internal/gpu"
	"github.com/better-compute/commands/plugins/internal/gpu/xid"
)

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
