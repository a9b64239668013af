package nvml

import (
	"fmt"

	"github.com/better-compute/commands/plugins/internal/gpu"
)

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
