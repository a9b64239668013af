package collect

import (
	"github.com/better-compute/commands/plugins/internal/gpu"
)

// merger folds partial GPUs from several sources into one per bus id. The
// first source to report a field wins (NVML, then nvidia-smi, then the
// kernel); a skip stays only while no source reported the field.
type merger struct {
	byBus   map[string]*gpu.GPU
	indexed map[string]bool
	order   []string
}

func newMerger() *merger {
	return &merger{byBus: map[string]*gpu.GPU{}, indexed: map[string]bool{}}
}

// add folds gs in; authoritativeIndex says the source's indexes are NVML's.
func (m *merger) add(gs []gpu.GPU, authoritativeIndex bool) {
	for _, g := range gs {
		if g.BusID == "" {
			continue
		}
		cur, ok := m.byBus[g.BusID]
		if !ok {
			c := g
			c.SeenBy = append([]string(nil), g.SeenBy...)
			c.Skipped = nil
			c.PCIe = copyPCIe(g.PCIe)
			m.byBus[g.BusID] = &c
			m.order = append(m.order, g.BusID)
			m.indexed[g.BusID] = authoritativeIndex
			m.skips(&c, g.Skipped)
			continue
		}
		for _, s := range g.SeenBy {
			cur.Seen(s)
		}
		if authoritativeIndex && !m.indexed[g.BusID] {
			cur.Index = g.Index
			m.indexed[g.BusID] = true
		}
		fill(&cur.UUID, g.UUID)
		fill(&cur.Name, g.Name)
		fill(&cur.DriverVersion, g.DriverVersion)
		if cur.PersistenceMode == nil {
			cur.PersistenceMode = g.PersistenceMode
		}
		if cur.MIG == nil {
			cur.MIG = g.MIG
		}
		if g.ECC != nil {
			if cur.ECC == nil {
				e := *g.ECC
				cur.ECC = &e
			} else {
				if cur.ECC.Enabled == nil {
					cur.ECC.Enabled, cur.ECC.PendingEnabled = g.ECC.Enabled, g.ECC.PendingEnabled
				}
				if cur.ECC.UncorrectableVolatile == nil {
					cur.ECC.UncorrectableVolatile, cur.ECC.UncorrectableAggregate = g.ECC.UncorrectableVolatile, g.ECC.UncorrectableAggregate
				}
			}
		}
		if cur.RemappedRows == nil {
			cur.RemappedRows = g.RemappedRows
		}
		cur.PCIe = mergePCIe(cur.PCIe, g.PCIe)
		m.skips(cur, g.Skipped)
	}
}

// skips adds a source's skips for fields still unreported.
func (m *merger) skips(cur *gpu.GPU, skipped map[string]string) {
	for field, why := range skipped {
		if reported(cur, field) {
			continue
		}
		if _, have := cur.Skipped[field]; have {
			continue
		}
		if cur.Skipped == nil {
			cur.Skipped = map[string]string{}
		}
		cur.Skipped[field] = why
	}
}

func (m *merger) result() []gpu.GPU {
	out := make([]gpu.GPU, 0, len(m.order))
	for _, bus := range m.order {
		g := m.byBus[bus]
		for field := range g.Skipped {
			if reported(g, field) {
				g.Unskip(field)
			}
		}
		out = append(out, *g)
	}
	return out
}

// reported says whether a field has a value.
func reported(g *gpu.GPU, field string) bool {
	switch field {
	case gpu.FieldPersistenceMode:
		return g.PersistenceMode != nil
	case gpu.FieldMIG:
		return g.MIG != nil
	case gpu.FieldECCMode:
		return g.ECC != nil && g.ECC.Enabled != nil
	case gpu.FieldECCErrors:
		return g.ECC != nil && g.ECC.UncorrectableVolatile != nil
	case gpu.FieldRemappedRows:
		return g.RemappedRows != nil
	case gpu.FieldPCIeLink:
		return g.PCIe != nil && g.PCIe.WidthMax > 0
	}
	return false
}

func fill(dst *string, v string) {
	if *dst == "" {
		*dst = v
	}
}

func copyPCIe(p *gpu.PCIe) *gpu.PCIe {
	if p == nil {
		return nil
	}
	c := *p
	c.WidthSamples = append([]int(nil), p.WidthSamples...)
	return &c
}

func mergePCIe(cur, add *gpu.PCIe) *gpu.PCIe {
	if add == nil {
		return cur
	}
	if cur == nil {
		return copyPCIe(add)
	}
	if cur.WidthMax == 0 && add.WidthMax > 0 {
		cur.WidthCurrent, cur.WidthMax = add.WidthCurrent, add.WidthMax
	}
	cur.WidthSamples = append(cur.WidthSamples, add.WidthSamples...)
	if cur.SysfsWidthMax == 0 {
		cur.SysfsWidthCurrent, cur.SysfsWidthMax = add.SysfsWidthCurrent, add.SysfsWidthMax
	}
	if cur.GenCurrent == 0 {
		cur.GenCurrent, cur.GenMax = add.GenCurrent, add.GenMax
	}
	if cur.SpeedCurrent == "" {
		cur.SpeedCurrent, cur.SpeedMax = add.SpeedCurrent, add.SpeedMax
	}
	return cur
}
