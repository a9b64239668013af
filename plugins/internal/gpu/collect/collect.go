// Package collect builds a node's GPU inventory from its sources: NVML
// (through an interface, so that this package needs no cgo), nvidia-smi, the
// kernel's view under a root, and the XID conditions of this boot from the
// kernel log. It merges them by normalised bus id.
package collect

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/better-compute/commands/plugins/internal/gpu"
	"github.com/better-compute/commands/plugins/internal/gpu/smi"
	"github.com/better-compute/commands/plugins/internal/gpu/sysview"
	"github.com/better-compute/commands/plugins/internal/gpu/xid"
)

// The sections of an inventory that a refresh may ask for.
const (
	SectionGPUs = "gpus"
	SectionXIDs = "xids"
	SectionPCIe = "pcie"
)

// AllSections are the sections a refresh collects by default.
var AllSections = []string{SectionGPUs, SectionXIDs, SectionPCIe}

// NVML is what the collector needs of NVML. plugins/nvml/nvmldriver
// implements it over go-nvml; it must never call NVML when Init failed.
type NVML interface {
	// Snapshot lists the GPUs as partial inventory entries (fields NVML
	// cannot report are Skipped with the reason), says whether NVML
	// answered, and returns the driver version.
	Snapshot(ctx context.Context) (gpus []gpu.GPU, status gpu.SourceStatus, driverVersion string)
}

// SMI is what the collector needs of nvidia-smi; smi.Tool implements it.
type SMI interface {
	Query(ctx context.Context) smi.Answer
}

// Collector collects inventories.
type Collector struct {
	// Kernel is the kernel's view (its Root may be a fake tree).
	Kernel sysview.View
	// NVML is the NVML source; nil skips it.
	NVML NVML
	// SMI is the nvidia-smi source; nil skips it.
	SMI SMI
	// KmsgPath is the kernel log; "" is xid.DefaultKmsgPath.
	KmsgPath string
	// StorePath is the XID store's file; "" keeps the store in memory.
	StorePath string
	// Ignore marks the XIDs that diag.nvml does not fail on.
	Ignore xid.Ignore
	// Now is the clock; time.Now when nil.
	Now func() time.Time
	// Logger logs; a null logger when nil.
	Logger hclog.Logger
}

// Options select what a collection refreshes.
type Options struct {
	// Sections are the sections to collect again (AllSections when empty);
	// the others are carried over from Previous.
	Sections []string
	// Rescan asks the kernel to rescan the PCI bus first (after a GPU swap).
	Rescan bool
	// Previous is the inventory bcd holds, or nil.
	Previous *gpu.Inventory
}

func (o Options) wants(section string) bool {
	if len(o.Sections) == 0 {
		return true
	}
	for _, s := range o.Sections {
		if s == section {
			return true
		}
	}
	return false
}

// ErrRescan is wrapped when the PCI rescan could not be asked for.
var ErrRescan = errors.New("PCI rescan failed")

// Collect builds an inventory. It fails only when the context ends; a
// source that does not answer is reported in Sources with the reason.
func (c *Collector) Collect(ctx context.Context, opts Options) (*gpu.Inventory, error) {
	log := c.Logger
	if log == nil {
		log = hclog.NewNullLogger()
	}
	now := time.Now
	if c.Now != nil {
		now = c.Now
	}
	if opts.Rescan {
		if err := c.rescan(); err != nil {
			log.Warn("pci rescan failed", "error", err)
		}
	}
	inv := &gpu.Inventory{SchemaVersion: gpu.SchemaVersion}
	if id, err := c.Kernel.BootID(); err == nil {
		inv.BootID = id
	} else {
		log.Warn("no boot id; XID conditions cannot be tied to this boot", "error", err)
	}

	if opts.wants(SectionGPUs) || opts.Previous == nil {
		c.collectGPUs(ctx, inv)
	} else {
		carryGPUs(inv, opts.Previous)
		if opts.wants(SectionPCIe) {
			c.refreshSysfsLinks(inv)
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("collecting GPU inventory: %w", err)
	}
	if opts.wants(SectionXIDs) || opts.Previous == nil {
		c.collectXIDs(inv, log)
	} else {
		carryXIDs(inv, opts.Previous)
	}
	inv.Sort()
	inv.CollectedAt = now().UTC()
	return inv, nil
}

// rescan writes 1 to /sys/bus/pci/rescan under the kernel view's root.
func (c *Collector) rescan() error {
	root := c.Kernel.Root
	if root == "" {
		root = "/"
	}
	p := filepath.Join(root, "sys", "bus", "pci", "rescan")
	if err := os.WriteFile(p, []byte("1"), 0o200); err != nil {
		return fmt.Errorf("%w: %w", ErrRescan, err)
	}
	return nil
}

func (c *Collector) collectGPUs(ctx context.Context, inv *gpu.Inventory) {
	m := newMerger()
	if c.NVML != nil {
		gs, st, drv := c.NVML.Snapshot(ctx)
		inv.Sources.NVML = st
		inv.DriverVersion = drv
		m.add(gs, true)
	} else {
		inv.Sources.NVML = gpu.SourceStatus{Reason: "NVML is not configured on this node"}
	}
	if c.SMI != nil {
		a := c.SMI.Query(ctx)
		inv.Sources.NvidiaSmi = a.Status
		m.add(a.GPUs, true)
		if inv.DriverVersion == "" && len(a.GPUs) > 0 {
			inv.DriverVersion = a.GPUs[0].DriverVersion
		}
	} else {
		inv.Sources.NvidiaSmi = gpu.SourceStatus{Reason: "nvidia-smi is not configured on this node"}
	}
	kg, kst := c.Kernel.GPUs()
	inv.Sources.Kernel = kst
	m.add(kg, false)
	if inv.DriverVersion == "" {
		inv.DriverVersion = c.Kernel.DriverVersion()
	}
	inv.GPUs = m.result()
}

// refreshSysfsLinks rereads the sysfs link widths of carried-over GPUs.
func (c *Collector) refreshSysfsLinks(inv *gpu.Inventory) {
	devs, err := c.Kernel.PCIDevices()
	if err != nil {
		return
	}
	for _, d := range devs {
		g := inv.GPUByBusID(d.BusID)
		if g == nil {
			continue
		}
		if g.PCIe == nil {
			g.PCIe = &gpu.PCIe{}
		}
		g.PCIe.SysfsWidthCurrent, g.PCIe.SysfsWidthMax = d.WidthCurrent, d.WidthMax
		g.PCIe.SpeedCurrent, g.PCIe.SpeedMax = d.SpeedCurrent, d.SpeedMax
	}
}

func (c *Collector) collectXIDs(inv *gpu.Inventory, log hclog.Logger) {
	path := c.KmsgPath
	if path == "" {
		path = xid.DefaultKmsgPath
	}
	store, err := xid.OpenStore(c.StorePath, inv.BootID)
	if err != nil {
		log.Warn("xid store unreadable; keeping this boot's conditions in memory only", "error", err)
		store, _ = xid.OpenStore("", inv.BootID)
	}
	st, err := store.ReadKmsg(path)
	if err != nil {
		inv.Sources.Kmsg = gpu.SourceStatus{Reason: err.Error()}
		log.Warn("reading the kernel log failed", "path", path, "error", err)
	} else {
		inv.Sources.Kmsg = gpu.SourceStatus{Answered: true}
		if st.Dropped > 0 {
			log.Info("the kernel ring dropped records before they were read; the XID store keeps what was read before", "dropped", st.Dropped)
		}
	}
	ignore := c.Ignore
	if ignore == nil {
		ignore = xid.NewIgnore(xid.DefaultIgnore...)
	}
	uuids := store.UUIDs()
	for i := range inv.GPUs {
		if inv.GPUs[i].UUID == "" {
			inv.GPUs[i].UUID = uuids[inv.GPUs[i].BusID]
		}
	}
	attachXIDs(inv, store.Conditions(ignore))
}

func attachXIDs(inv *gpu.Inventory, conds []gpu.XIDCondition) {
	seen := map[string]bool{}
	for i := range inv.GPUs {
		inv.GPUs[i].XIDs = nil
	}
	inv.UnmatchedXIDs = nil
	for _, cnd := range conds {
		if g := inv.GPUByBusID(cnd.BusID); g != nil {
			g.XIDs = append(g.XIDs, cnd)
			seen[cnd.BusID] = true
			continue
		}
		inv.UnmatchedXIDs = append(inv.UnmatchedXIDs, cnd)
	}
	inv.Sources.Kmsg.GPUs = len(seen)
}

func carryGPUs(inv, prev *gpu.Inventory) {
	inv.Sources.NVML, inv.Sources.NvidiaSmi, inv.Sources.Kernel = prev.Sources.NVML, prev.Sources.NvidiaSmi, prev.Sources.Kernel
	inv.DriverVersion = prev.DriverVersion
	// A deep copy, so that refreshing a section never edits the caller's
	// previous inventory through a shared pointer.
	var gs []gpu.GPU
	if b, err := json.Marshal(prev.GPUs); err == nil && json.Unmarshal(b, &gs) == nil {
		inv.GPUs = gs
		return
	}
	inv.GPUs = append([]gpu.GPU(nil), prev.GPUs...)
}

func carryXIDs(inv, prev *gpu.Inventory) {
	inv.Sources.Kmsg = prev.Sources.Kmsg
	var conds []gpu.XIDCondition
	for _, g := range prev.GPUs {
		conds = append(conds, g.XIDs...)
	}
	conds = append(conds, prev.UnmatchedXIDs...)
	sort.SliceStable(conds, func(i, j int) bool { return conds[i].BusID < conds[j].BusID })
	attachXIDs(inv, conds)
}
