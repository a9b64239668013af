package gpu

import (
	"encoding/json"
	"fmt"
	"sort"
	"time"
)

// SchemaVersion is the version of the inventory document; bump it when a
// field changes meaning, so a reader can tell an old inventory from a new one.
const SchemaVersion = 1

// The sources an inventory merges, as GPU.SeenBy and Sources name them.
const (
	SourceKernel    = "kernel"
	SourceNVML      = "nvml"
	SourceNvidiaSmi = "nvidia-smi"
	SourceKmsg      = "kmsg"
)

// The fields that a source may skip, as GPU.Skipped keys them.
const (
	FieldPersistenceMode = "persistenceMode"
	FieldMIG             = "mig"
	FieldECCMode         = "ecc.mode"
	FieldECCErrors       = "ecc.uncorrectable"
	FieldRemappedRows    = "remappedRows"
	FieldPCIeLink        = "pcie.link"
)

// Inventory is one node's GPU inventory: what inventory.refresh collects,
// bcd stores and sends to the control plane, and diag.nvml judges.
type Inventory struct {
	// SchemaVersion is SchemaVersion at collection time.
	SchemaVersion int `json:"schemaVersion"`
	// CollectedAt is when the collection finished.
	CollectedAt time.Time `json:"collectedAt"`
	// BootID is the kernel's boot id; XID conditions are "this boot" for it.
	BootID string `json:"bootId,omitempty"`
	// DriverVersion is the NVIDIA driver version (NVML, else nvidia-smi, else the kernel).
	DriverVersion string `json:"driverVersion,omitempty"`
	// Sources says which sources answered and, when one did not, why.
	Sources Sources `json:"sources"`
	// GPUs are the GPUs, merged by bus id and sorted by index then bus id.
	GPUs []GPU `json:"gpus"`
	// UnmatchedXIDs are XID conditions whose bus id names none of the GPUs
	// (a GPU that fell off the bus so far that no source lists it any more).
	UnmatchedXIDs []XIDCondition `json:"unmatchedXids,omitempty"`
}

// Sources reports each source of an inventory.
type Sources struct {
	Kernel    SourceStatus `json:"kernel"`
	NVML      SourceStatus `json:"nvml"`
	NvidiaSmi SourceStatus `json:"nvidiaSmi"`
	Kmsg      SourceStatus `json:"kmsg"`
}

// SourceStatus says whether a source answered, how many GPUs it named, and
// why it did not answer.
type SourceStatus struct {
	// Answered is true when the source gave a usable answer. For nvidia-smi
	// that means it exited 0 with at least one well-formed row.
	Answered bool `json:"answered"`
	// GPUs is the number of GPUs the source named.
	GPUs int `json:"gpus"`
	// Reason says, in words, why the source did not answer (or was skipped).
	Reason string `json:"reason,omitempty"`
	// ExitCode is the tool's exit status, for sources that are executables.
	ExitCode *int `json:"exitCode,omitempty"`
}

// GPU is one physical GPU as the merged sources see it. A nil pointer field
// was not reported by any source; Skipped then says why when a source said so.
type GPU struct {
	// Index is NVML's (and nvidia-smi's) index, or the position in bus-id
	// order when only the kernel names the GPU.
	Index int `json:"index"`
	// UUID is "GPU-…".
	UUID string `json:"uuid,omitempty"`
	// BusID is the normalised PCI bus id, "0000:3b:00" (see NormalizeBusID).
	BusID string `json:"busId"`
	// Name is the product name.
	Name string `json:"name,omitempty"`
	// DriverVersion is the driver that drives this GPU.
	DriverVersion string `json:"driverVersion,omitempty"`
	// PersistenceMode is true when persistence mode is on.
	PersistenceMode *bool `json:"persistenceMode,omitempty"`
	// MIG is the MIG mode and its instances.
	MIG *MIG `json:"mig,omitempty"`
	// ECC is the ECC mode and the uncorrectable error counts.
	ECC *ECC `json:"ecc,omitempty"`
	// RemappedRows are the row-remapping counters (Ampere and later).
	RemappedRows *RemappedRows `json:"remappedRows,omitempty"`
	// PCIe is the link width (and speed, reported and never judged).
	PCIe *PCIe `json:"pcie,omitempty"`
	// XIDs are the XID conditions of this GPU this boot.
	XIDs []XIDCondition `json:"xids,omitempty"`
	// SeenBy names the sources that listed this GPU.
	SeenBy []string `json:"seenBy"`
	// Skipped maps a field (FieldECCErrors, ...) to "skipped: <reason>",
	// for a field a source could not report (NOT_SUPPORTED, [N/A]): never a
	// silent pass.
	Skipped map[string]string `json:"skipped,omitempty"`
}

// MIG is a GPU's MIG mode and instances.
type MIG struct {
	// Enabled is the current MIG mode.
	Enabled bool `json:"enabled"`
	// PendingEnabled is the mode after the next reset, when it differs.
	PendingEnabled *bool `json:"pendingEnabled,omitempty"`
	// Instances are the MIG devices.
	Instances []MIGInstance `json:"instances,omitempty"`
}

// MIGInstance is one MIG device of a GPU.
type MIGInstance struct {
	// UUID is the MIG device UUID ("MIG-…").
	UUID string `json:"uuid"`
	// ParentUUID is the UUID of the GPU that holds it.
	ParentUUID string `json:"parentUuid"`
	// GPUInstanceID and ComputeInstanceID locate it within the GPU.
	GPUInstanceID     int `json:"gpuInstanceId"`
	ComputeInstanceID int `json:"computeInstanceId"`
}

// ECC is a GPU's ECC mode and uncorrectable error counts.
type ECC struct {
	// Enabled is the current ECC mode.
	Enabled *bool `json:"enabled,omitempty"`
	// PendingEnabled is the mode after the next reboot, when it differs.
	PendingEnabled *bool `json:"pendingEnabled,omitempty"`
	// UncorrectableVolatile counts uncorrectable errors since the driver
	// loaded. diag.nvml gates on it.
	UncorrectableVolatile *uint64 `json:"uncorrectableVolatile,omitempty"`
	// UncorrectableAggregate counts them over the GPU's life: information only.
	UncorrectableAggregate *uint64 `json:"uncorrectableAggregate,omitempty"`
}

// RemappedRows are a GPU's row-remapping counters.
type RemappedRows struct {
	Correctable   int  `json:"correctable"`
	Uncorrectable int  `json:"uncorrectable"`
	Pending       bool `json:"pending"`
	Failure       bool `json:"failure"`
}

// PCIe is a GPU's PCIe link. Speed is reported, never judged: idle GPUs
// lower it on purpose.
type PCIe struct {
	// WidthCurrent and WidthMax are the lanes now and at most, from NVML or
	// nvidia-smi; 0 when unknown.
	WidthCurrent int `json:"widthCurrent,omitempty"`
	WidthMax     int `json:"widthMax,omitempty"`
	// WidthSamples are the current widths read from the driver at different
	// moments (NVML, then nvidia-smi). A narrow link that persists across two
	// samples is not an idle GPU saving power.
	WidthSamples []int `json:"widthSamples,omitempty"`
	// SysfsWidthCurrent and SysfsWidthMax are the kernel's view
	// (current_link_width, max_link_width); 0 when unknown.
	SysfsWidthCurrent int `json:"sysfsWidthCurrent,omitempty"`
	SysfsWidthMax     int `json:"sysfsWidthMax,omitempty"`
	// GenCurrent and GenMax are the PCIe generations.
	GenCurrent int `json:"genCurrent,omitempty"`
	GenMax     int `json:"genMax,omitempty"`
	// SpeedCurrent and SpeedMax are sysfs's words ("16.0 GT/s PCIe").
	SpeedCurrent string `json:"speedCurrent,omitempty"`
	SpeedMax     string `json:"speedMax,omitempty"`
}

// The recommended actions of an XID condition.
const (
	// ActionInformation needs nothing from an operator (an application fault).
	ActionInformation = "information"
	// ActionReset needs a GPU reset (gpu.reset) once no allocation is live.
	ActionReset = "reset"
	// ActionReboot needs a node reboot; a GPU reset cannot recover it (XID 79).
	ActionReboot = "reboot"
)

// XIDCondition is one XID seen on one GPU this boot, folded over repeats.
type XIDCondition struct {
	// XID is the Xid number; a "fallen off the bus" line without one is 79.
	XID int `json:"xid"`
	// BusID is the normalised bus id the kernel named.
	BusID string `json:"busId"`
	// Action is ActionInformation, ActionReset or ActionReboot.
	Action string `json:"action"`
	// Ignored is true for an XID in the ignore list (application XIDs).
	Ignored bool `json:"ignored,omitempty"`
	// Count is how many times the kernel logged it this boot.
	Count int `json:"count"`
	// FirstSeq and LastSeq are the kmsg sequence numbers of the first and
	// last record.
	FirstSeq uint64 `json:"firstSeq,omitempty"`
	LastSeq  uint64 `json:"lastSeq,omitempty"`
	// FirstSeen and LastSeen are the kernel timestamps (since boot).
	FirstSeen Duration `json:"firstSeen"`
	LastSeen  Duration `json:"lastSeen"`
	// Message is the last record's text after "NVRM: Xid (…): N, ".
	Message string `json:"message,omitempty"`
}

// Duration is a time.Duration that reads and writes JSON as "1h2m3.5s".
type Duration time.Duration

// MarshalJSON writes the duration as a Go duration string.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

// UnmarshalJSON reads a Go duration string.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("duration must be a string such as \"90s\": %w", err)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("duration %q: %w", s, err)
	}
	*d = Duration(v)
	return nil
}

// Skip records that field was not reported, and why.
func (g *GPU) Skip(field, reason string) {
	if g.Skipped == nil {
		g.Skipped = map[string]string{}
	}
	g.Skipped[field] = "skipped: " + reason
}

// Unskip forgets a skip once another source reported the field.
func (g *GPU) Unskip(field string) {
	delete(g.Skipped, field)
	if len(g.Skipped) == 0 {
		g.Skipped = nil
	}
}

// SkipReason returns the "skipped: <reason>" of field, or "".
func (g *GPU) SkipReason(field string) string { return g.Skipped[field] }

// Seen records that source listed the GPU.
func (g *GPU) Seen(source string) {
	for _, s := range g.SeenBy {
		if s == source {
			return
		}
	}
	g.SeenBy = append(g.SeenBy, source)
}

// SeenByAny reports whether one of sources listed the GPU.
func (g *GPU) SeenByAny(sources ...string) bool {
	for _, s := range g.SeenBy {
		for _, want := range sources {
			if s == want {
				return true
			}
		}
	}
	return false
}

// Label names the GPU for an operator: "GPU 3 (GPU-…, 0000:3b:00)".
func (g *GPU) Label() string {
	uuid := g.UUID
	if uuid == "" {
		uuid = "uuid unknown"
	}
	return fmt.Sprintf("GPU %d (%s, %s)", g.Index, uuid, g.BusID)
}

// GPUByBusID returns the GPU with the (normalised) bus id, or nil.
func (inv *Inventory) GPUByBusID(busID string) *GPU {
	busID = NormalizeBusID(busID)
	for i := range inv.GPUs {
		if inv.GPUs[i].BusID == busID {
			return &inv.GPUs[i]
		}
	}
	return nil
}

// GPUByUUID returns the GPU with the UUID, or nil.
func (inv *Inventory) GPUByUUID(uuid string) *GPU {
	for i := range inv.GPUs {
		if inv.GPUs[i].UUID == uuid {
			return &inv.GPUs[i]
		}
	}
	return nil
}

// Sort orders the GPUs by index, then bus id.
func (inv *Inventory) Sort() {
	sort.SliceStable(inv.GPUs, func(i, j int) bool {
		a, b := inv.GPUs[i], inv.GPUs[j]
		if a.Index != b.Index {
			return a.Index < b.Index
		}
		return a.BusID < b.BusID
	})
}

// Decode reads an inventory document as bcd stores it.
func Decode(raw []byte) (*Inventory, error) {
	var inv Inventory
	if err := json.Unmarshal(raw, &inv); err != nil {
		return nil, fmt.Errorf("decoding GPU inventory: %w", err)
	}
	return &inv, nil
}

// Ptr returns a pointer to v; inventory fields are pointers so that "not
// reported" differs from zero.
func Ptr[T any](v T) *T { return &v }
