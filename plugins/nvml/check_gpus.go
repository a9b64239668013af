package nvml

import (
	"fmt"
	"strings"

	"github.com/better-compute/commands/plugins/internal/gpu"
	"github.com/better-compute/commands/plugins/internal/gpu/smi"
)

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
