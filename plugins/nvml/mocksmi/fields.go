package mocksmi

import (
	"strconv"

	"github.com/better-compute/commands/plugins/internal/gpu"
)

// na is what nvidia-smi prints for a value the GPU does not report.
const na = "[N/A]"

func enabled(b bool) string {
	if b {
		return "Enabled"
	}
	return "Disabled"
}

func yesNo(b bool) string {
	if b {
		return "Yes"
	}
	return "No"
}

func count[T int | uint64](v T) string { return strconv.FormatUint(uint64(v), 10) }

// gpuFields are the --query-gpu fields the mock answers: those the GPU
// kinds ask for (smi.QueryGPUFields, gpu.reset's and the health query's),
// and the remapped_rows.* that newer drivers take there too.
func (m mock) gpuFields() map[string]func(gpu.GPU) string {
	f := map[string]func(gpu.GPU) string{
		"index":          func(g gpu.GPU) string { return strconv.Itoa(g.Index) },
		"uuid":           func(g gpu.GPU) string { return g.UUID },
		"pci.bus_id":     m.busID,
		"name":           func(g gpu.GPU) string { return g.Name },
		"driver_version": func(g gpu.GPU) string { return g.DriverVersion },
		"count":          func(gpu.GPU) string { return strconv.Itoa(len(m.gpus)) },
		"persistence_mode": func(g gpu.GPU) string {
			if g.PersistenceMode == nil {
				return na
			}
			return enabled(*g.PersistenceMode)
		},
		"mig.mode.current": func(g gpu.GPU) string {
			if g.MIG == nil {
				return na
			}
			return enabled(g.MIG.Enabled)
		},
		"mig.mode.pending": func(g gpu.GPU) string {
			switch {
			case g.MIG == nil:
				return na
			case g.MIG.PendingEnabled != nil:
				return enabled(*g.MIG.PendingEnabled)
			}
			return enabled(g.MIG.Enabled)
		},
		"ecc.mode.current": func(g gpu.GPU) string {
			if g.ECC == nil || g.ECC.Enabled == nil {
				return na
			}
			return enabled(*g.ECC.Enabled)
		},
		"ecc.mode.pending": func(g gpu.GPU) string {
			switch {
			case g.ECC == nil || g.ECC.Enabled == nil:
				return na
			case g.ECC.PendingEnabled != nil:
				return enabled(*g.ECC.PendingEnabled)
			}
			return enabled(*g.ECC.Enabled)
		},
		"ecc.errors.uncorrected.volatile.total": func(g gpu.GPU) string {
			if g.ECC == nil || g.ECC.UncorrectableVolatile == nil {
				return na
			}
			return count(*g.ECC.UncorrectableVolatile)
		},
		"ecc.errors.uncorrected.aggregate.total": func(g gpu.GPU) string {
			if g.ECC == nil || g.ECC.UncorrectableAggregate == nil {
				return na
			}
			return count(*g.ECC.UncorrectableAggregate)
		},
		"pcie.link.gen.current":   pcie(func(p *gpu.PCIe) int { return p.GenCurrent }),
		"pcie.link.gen.max":       pcie(func(p *gpu.PCIe) int { return p.GenMax }),
		"pcie.link.width.current": pcie(func(p *gpu.PCIe) int { return p.WidthCurrent }),
		"pcie.link.width.max":     pcie(func(p *gpu.PCIe) int { return p.WidthMax }),
	}
	for k, v := range remapped() {
		f[k] = v
	}
	return f
}

func pcie(field func(*gpu.PCIe) int) func(gpu.GPU) string {
	return func(g gpu.GPU) string {
		if g.PCIe == nil {
			return na
		}
		return strconv.Itoa(field(g.PCIe))
	}
}

// remapped are the remapped_rows.* fields: [N/A] where NVML does not
// report them (MIG on, or not supported).
func remapped() map[string]func(gpu.GPU) string {
	rr := func(field func(*gpu.RemappedRows) string) func(gpu.GPU) string {
		return func(g gpu.GPU) string {
			if g.RemappedRows == nil {
				return na
			}
			return field(g.RemappedRows)
		}
	}
	return map[string]func(gpu.GPU) string{
		"remapped_rows.correctable":   rr(func(r *gpu.RemappedRows) string { return count(r.Correctable) }),
		"remapped_rows.uncorrectable": rr(func(r *gpu.RemappedRows) string { return count(r.Uncorrectable) }),
		"remapped_rows.pending":       rr(func(r *gpu.RemappedRows) string { return yesNo(r.Pending) }),
		"remapped_rows.failure":       rr(func(r *gpu.RemappedRows) string { return yesNo(r.Failure) }),
	}
}

// remapFields are the --query-remapped-rows fields.
func (m mock) remapFields() map[string]func(gpu.GPU) string {
	f := remapped()
	f["gpu_uuid"] = func(g gpu.GPU) string { return g.UUID }
	f["gpu_bus_id"] = m.busID
	return f
}

// computeAppFields are the --query-compute-apps fields; a mock GPU runs no
// process, so they name columns only and no row is ever printed.
var computeAppFields = map[string]func(gpu.GPU) string{
	"gpu_uuid": noProcess, "gpu_bus_id": noProcess, "pid": noProcess, "process_name": noProcess, "used_memory": noProcess, "gpu_name": noProcess,
}

func noProcess(gpu.GPU) string { return "" }
