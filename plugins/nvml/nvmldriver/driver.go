// Package nvmldriver is the thin NVML driver of the bc-kind-nvml plugin,
// over github.com/NVIDIA/go-nvml (cgo). It implements collect.NVML. Init
// must succeed before any other call: on a host without libnvidia-ml, a call
// after a failed Init kills the process with a symbol lookup error that
// recover cannot catch, so the driver remembers the failed Init and answers
// every Snapshot with it. NOT_SUPPORTED fields are skipped with their
// reason, never passed silently.
//
// A source string selects the library: "" or "nvml" (libnvidia-ml.so.1),
// "nvml:/path/to/libnvidia-ml.so.1", or one of go-nvml's mock servers,
// "mock:dgxh200" (dgxa100, dgxh100, dgxb200), with faults injected from a
// string such as "gpu=3:row-remap-pending,gpu=5:ecc-uncorrectable=2", and
// optionally kept in a state file (MockFile) that every process on the
// node shares, so that a mock GPU reset by the mock nvidia-smi stays reset.
package nvmldriver

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"

	"github.com/better-compute/commands/plugins/internal/gpu"
)

// ErrBadSource is wrapped when a source string names no known source.
var ErrBadSource = errors.New("unknown NVML source")

// Driver reads GPUs through NVML.
type Driver struct {
	name string

	// lock guards lib's use and closed: NVML handles are not to be used
	// after Shutdown.
	lock       sync.Mutex
	lib        nvml.Interface
	initErr    string
	closed     bool
	initedOnce bool
	// reload, when set, reads the mock GPUs' state file again before each
	// Snapshot: another process (the mock nvidia-smi of a gpu.reset) may
	// have changed it.
	reload func() error
	// server is the mock server behind lib, nil for the real library.
	server *server.Server
}

// Open selects the source, applies faults (mock sources only), and calls
// Init. A failed Init is not an error here: the driver then reports NVML as
// not answering, with the reason, and never calls NVML again. The error is
// for a source or fault string it cannot read.
func Open(source, faults string) (*Driver, error) {
	return OpenState(source, faults, "")
}

// OpenState is Open with the mock GPUs kept in the file state (see
// MockFile; "" keeps them in this process only). A state file applies to
// a mock source only.
func OpenState(source, faults, state string) (*Driver, error) {
	source = strings.TrimSpace(source)
	if state != "" && !strings.HasPrefix(source, "mock:") {
		return nil, fmt.Errorf("a mock GPU state file (%s) applies to a mock source only, not %q", state, source)
	}
	switch {
	case source == "" || source == "nvml" || source == "auto":
		if faults != "" {
			return nil, fmt.Errorf("NVML faults can only be injected into a mock source, not the real library")
		}
		return New(nvml.New(), "nvml"), nil
	case strings.HasPrefix(source, "nvml:"):
		if faults != "" {
			return nil, fmt.Errorf("NVML faults can only be injected into a mock source, not the real library")
		}
		return New(nvml.New(nvml.WithLibraryPath(strings.TrimPrefix(source, "nvml:"))), source), nil
	case strings.HasPrefix(source, "mock:"):
		srv, err := NewMockServer(strings.TrimPrefix(source, "mock:"))
		if err != nil {
			return nil, err
		}
		fs, err := ParseFaults(faults)
		if err != nil {
			return nil, err
		}
		if state == "" {
			if err := ApplyFaults(srv, fs); err != nil {
				return nil, err
			}
			d := New(srv, source)
			d.server = srv
			return d, nil
		}
		file := MockFile{Path: state, Model: strings.TrimPrefix(source, "mock:")}
		if err := file.Init(srv, fs); err != nil {
			return nil, err
		}
		d := New(srv, source)
		d.server, d.reload = srv, func() error { return file.Load(srv) }
		return d, nil
	}
	return nil, fmt.Errorf("%w %q: want \"nvml\", \"nvml:<library path>\" or \"mock:<dgxa100|dgxh100|dgxh200|dgxb200>\"", ErrBadSource, source)
}

// New wraps an nvml.Interface (the library or a mock) and calls Init.
func New(lib nvml.Interface, name string) *Driver {
	d := &Driver{lib: lib, name: name}
	if ret := lib.Init(); ret != nvml.SUCCESS {
		d.initErr = fmt.Sprintf("NVML did not initialise (%s): %s", name, describe(ret))
		return d
	}
	d.initedOnce = true
	return d
}

// MockServer is the mock server behind a mock source (nil for the real
// library): the mock nvidia-smi changes its GPUs through MockFile.Update.
func (d *Driver) MockServer() *server.Server { return d.server }

// InitError returns why Init failed, or "".
func (d *Driver) InitError() string { return d.initErr }

// Close shuts NVML down, if Init succeeded. A GPU reset needs every NVML
// handle closed, ours included.
func (d *Driver) Close() {
	d.lock.Lock()
	defer d.lock.Unlock()
	if d.initedOnce && !d.closed {
		_ = d.lib.Shutdown()
	}
	d.closed = true
}

// Snapshot lists the GPUs. It never calls NVML after a failed Init.
func (d *Driver) Snapshot(ctx context.Context) ([]gpu.GPU, gpu.SourceStatus, string) {
	d.lock.Lock()
	defer d.lock.Unlock()
	if d.initErr != "" {
		return nil, gpu.SourceStatus{Reason: d.initErr}, ""
	}
	if d.closed {
		return nil, gpu.SourceStatus{Reason: "NVML was shut down"}, ""
	}
	if d.reload != nil {
		if err := d.reload(); err != nil {
			return nil, gpu.SourceStatus{Reason: err.Error()}, ""
		}
	}
	drv, ret := d.lib.SystemGetDriverVersion()
	if ret != nvml.SUCCESS {
		drv = ""
	}
	n, ret := d.lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return nil, gpu.SourceStatus{Reason: "NVML could not count the GPUs: " + describe(ret)}, drv
	}
	var out []gpu.GPU
	for i := 0; i < n; i++ {
		if ctx.Err() != nil {
			break
		}
		dev, ret := d.lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			// A GPU that is lost (XID 79) has no handle; the kernel's
			// view still lists it, and diag.nvml says it is missing.
			continue
		}
		g, ok := readDevice(dev, i, drv)
		if ok {
			out = append(out, g)
		}
	}
	return out, gpu.SourceStatus{Answered: true, GPUs: len(out)}, drv
}

func readDevice(dev nvml.Device, index int, drv string) (gpu.GPU, bool) {
	g := gpu.GPU{Index: index, DriverVersion: drv}
	pci, ret := dev.GetPciInfo()
	if ret != nvml.SUCCESS {
		return g, false
	}
	g.BusID = gpu.NormalizeBusID(cString(pci.BusId[:]))
	if g.BusID == "" {
		return g, false
	}
	g.Seen(gpu.SourceNVML)
	if uuid, ret := dev.GetUUID(); ret == nvml.SUCCESS {
		g.UUID = uuid
	}
	if name, ret := dev.GetName(); ret == nvml.SUCCESS {
		g.Name = name
	}
	if pm, ret := dev.GetPersistenceMode(); ret == nvml.SUCCESS {
		g.PersistenceMode = gpu.Ptr(pm == nvml.FEATURE_ENABLED)
	} else {
		g.Skip(gpu.FieldPersistenceMode, reason(ret))
	}
	readMIG(dev, &g)
	readECC(dev, &g)
	switch corr, unc, pending, failure, ret := dev.GetRemappedRows(); {
	case ret == nvml.SUCCESS:
		g.RemappedRows = &gpu.RemappedRows{Correctable: corr, Uncorrectable: unc, Pending: pending, Failure: failure}
	case ret == nvml.ERROR_NOT_SUPPORTED && g.MIGEnabled():
		// NVML does not report them with MIG instances active; the GPU
		// has row remapping all the same.
		g.Skip(gpu.FieldRemappedRows, gpu.RemapUnknownInMIG("NVML reports NOT_SUPPORTED"))
	default:
		g.Skip(gpu.FieldRemappedRows, reason(ret))
	}
	cur, ret1 := dev.GetCurrPcieLinkWidth()
	max, ret2 := dev.GetMaxPcieLinkWidth()
	switch {
	case ret1 == nvml.SUCCESS && ret2 == nvml.SUCCESS:
		g.PCIe = &gpu.PCIe{WidthCurrent: cur, WidthMax: max, WidthSamples: []int{cur}}
		if gen, ret := dev.GetCurrPcieLinkGeneration(); ret == nvml.SUCCESS {
			g.PCIe.GenCurrent = gen
		}
		if gen, ret := dev.GetMaxPcieLinkGeneration(); ret == nvml.SUCCESS {
			g.PCIe.GenMax = gen
		}
	case ret1 != nvml.SUCCESS:
		g.Skip(gpu.FieldPCIeLink, reason(ret1))
	default:
		g.Skip(gpu.FieldPCIeLink, reason(ret2))
	}
	return g, true
}

func readMIG(dev nvml.Device, g *gpu.GPU) {
	cur, pending, ret := dev.GetMigMode()
	if ret != nvml.SUCCESS {
		g.Skip(gpu.FieldMIG, reason(ret))
		return
	}
	g.MIG = &gpu.MIG{Enabled: cur == nvml.DEVICE_MIG_ENABLE}
	if pending != cur {
		g.MIG.PendingEnabled = gpu.Ptr(pending == nvml.DEVICE_MIG_ENABLE)
	}
	if !g.MIG.Enabled {
		return
	}
	max, ret := dev.GetMaxMigDeviceCount()
	if ret != nvml.SUCCESS {
		return
	}
	for j := 0; j < max; j++ {
		mig, ret := dev.GetMigDeviceHandleByIndex(j)
		if ret != nvml.SUCCESS {
			// ERROR_NOT_FOUND: no MIG device in that slot.
			continue
		}
		inst := gpu.MIGInstance{ParentUUID: g.UUID}
		if u, ret := mig.GetUUID(); ret == nvml.SUCCESS {
			inst.UUID = u
		}
		if id, ret := mig.GetGpuInstanceId(); ret == nvml.SUCCESS {
			inst.GPUInstanceID = id
		}
		if id, ret := mig.GetComputeInstanceId(); ret == nvml.SUCCESS {
			inst.ComputeInstanceID = id
		}
		g.MIG.Instances = append(g.MIG.Instances, inst)
	}
}

func readECC(dev nvml.Device, g *gpu.GPU) {
	cur, pend, ret := dev.GetEccMode()
	if ret != nvml.SUCCESS {
		g.Skip(gpu.FieldECCMode, reason(ret))
		g.Skip(gpu.FieldECCErrors, reason(ret))
		return
	}
	e := &gpu.ECC{Enabled: gpu.Ptr(cur == nvml.FEATURE_ENABLED)}
	if pend != cur {
		e.PendingEnabled = gpu.Ptr(pend == nvml.FEATURE_ENABLED)
	}
	g.ECC = e
	vol, ret := dev.GetTotalEccErrors(nvml.MEMORY_ERROR_TYPE_UNCORRECTED, nvml.VOLATILE_ECC)
	if ret != nvml.SUCCESS {
		g.Skip(gpu.FieldECCErrors, reason(ret))
		return
	}
	e.UncorrectableVolatile = gpu.Ptr(vol)
	if agg, ret := dev.GetTotalEccErrors(nvml.MEMORY_ERROR_TYPE_UNCORRECTED, nvml.AGGREGATE_ECC); ret == nvml.SUCCESS {
		e.UncorrectableAggregate = gpu.Ptr(agg)
	}
}

// reason words an NVML return for GPU.Skipped.
func reason(ret nvml.Return) string {
	if ret == nvml.ERROR_NOT_SUPPORTED {
		return "NVML reports NOT_SUPPORTED for this GPU"
	}
	return "NVML error: " + describe(ret)
}

// describe names a return. Return.Error() uses a table in Go until the
// library loaded, so it is safe to call after a failed Init.
func describe(ret nvml.Return) string {
	switch ret {
	case nvml.ERROR_LIBRARY_NOT_FOUND:
		return "ERROR_LIBRARY_NOT_FOUND: libnvidia-ml.so.1 is not installed"
	case nvml.ERROR_DRIVER_NOT_LOADED:
		return "ERROR_DRIVER_NOT_LOADED: the NVIDIA kernel module is not loaded"
	case nvml.ERROR_GPU_IS_LOST:
		return "ERROR_GPU_IS_LOST: a GPU fell off the bus (XID 79)"
	case nvml.ERROR_LIB_RM_VERSION_MISMATCH:
		return "ERROR_LIB_RM_VERSION_MISMATCH: the NVML library and the kernel module are different versions"
	}
	return ret.Error()
}

// cString reads a NUL-terminated C char array.
func cString[T int8 | uint8](b []T) string {
	var sb strings.Builder
	for _, c := range b {
		if c == 0 {
			break
		}
		sb.WriteByte(byte(c))
	}
	return sb.String()
}
