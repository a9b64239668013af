package nvmldriver

import (
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxb200"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh200"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
)

// MockModels are the mock servers a source may name.
var MockModels = []string{"dgxa100", "dgxh100", "dgxh200", "dgxb200"}

// NewMockServer returns one of go-nvml's 8-GPU mock servers with a healthy
// answer set for every method the driver calls: the mocks panic on a method
// nobody set, and leave ECC, remapped rows, PCIe, persistence and PCI bus
// ids unimplemented. Each GPU sits at bus 0000:<index+0x18>:00, as on a
// DGX, rather than the mock's 0000:0N:00.
func NewMockServer(model string) (*server.Server, error) {
	var s *server.Server
	switch model {
	case "dgxa100":
		s = dgxa100.New()
	case "dgxh100":
		s = dgxh100.New()
	case "dgxh200":
		s = dgxh200.New()
	case "dgxb200":
		s = dgxb200.New()
	default:
		return nil, fmt.Errorf("%w: no mock server %q (want one of %s)", ErrBadSource, model, strings.Join(MockModels, ", "))
	}
	for _, d := range s.Devices {
		dev := d.(*server.Device)
		dev.PciBusID = fmt.Sprintf("00000000:%02X:00.0", 0x18+dev.Index*0x10)
		st := &MockState{WidthCurrent: 16, WidthMax: 16, Gen: 5, ECCEnabled: true, Persistence: true, NotSupported: map[string]bool{}}
		mockStates.Store(dev, st)
		setHealthy(dev, st)
	}
	return s, nil
}

// mockStates maps a mock device to its state, for ApplyFaults.
var mockStates sync.Map

// MockState is what a mock device reports beyond go-nvml's own mock. Tests
// change it through Fault values or State.
type MockState struct {
	lock           sync.Mutex
	Persistence    bool
	ECCEnabled     bool
	ECCVolatile    uint64
	ECCAggregate   uint64
	RemapCorr      int
	RemapUnc       int
	RemapPending   bool
	RemapFailure   bool
	WidthCurrent   int
	WidthMax       int
	Gen            int
	MIGInstances   int
	NotSupported   map[string]bool
	migHandleCache []nvml.Device
}

// State returns the MockState of a device of a server from NewMockServer.
func State(d nvml.Device) *MockState {
	v, ok := mockStates.Load(d)
	if !ok {
		return nil
	}
	return v.(*MockState)
}

func setHealthy(dev *server.Device, st *MockState) {
	notSupported := func(field string) bool { return st.NotSupported[field] }
	dev.GetPciInfoFunc = func() (nvml.PciInfo, nvml.Return) {
		p := nvml.PciInfo{PciDeviceId: dev.Config.PciDeviceId, Bus: uint32(0x18 + dev.Index*0x10)}
		for i := 0; i < len(dev.PciBusID) && i < len(p.BusId)-1; i++ {
			p.BusId[i] = int8(dev.PciBusID[i])
		}
		return p, nvml.SUCCESS
	}
	dev.GetPersistenceModeFunc = func() (nvml.EnableState, nvml.Return) {
		st.lock.Lock()
		defer st.lock.Unlock()
		if st.Persistence {
			return nvml.FEATURE_ENABLED, nvml.SUCCESS
		}
		return nvml.FEATURE_DISABLED, nvml.SUCCESS
	}
	dev.GetEccModeFunc = func() (nvml.EnableState, nvml.EnableState, nvml.Return) {
		st.lock.Lock()
		defer st.lock.Unlock()
		if notSupported("ecc") {
			return 0, 0, nvml.ERROR_NOT_SUPPORTED
		}
		if st.ECCEnabled {
			return nvml.FEATURE_ENABLED, nvml.FEATURE_ENABLED, nvml.SUCCESS
		}
		return nvml.FEATURE_DISABLED, nvml.FEATURE_DISABLED, nvml.SUCCESS
	}
	dev.GetTotalEccErrorsFunc = func(t nvml.MemoryErrorType, c nvml.EccCounterType) (uint64, nvml.Return) {
		st.lock.Lock()
		defer st.lock.Unlock()
		if notSupported("ecc") || t != nvml.MEMORY_ERROR_TYPE_UNCORRECTED {
			return 0, nvml.ERROR_NOT_SUPPORTED
		}
		if c == nvml.VOLATILE_ECC {
			return st.ECCVolatile, nvml.SUCCESS
		}
		return st.ECCAggregate, nvml.SUCCESS
	}
	dev.GetRemappedRowsFunc = func() (int, int, bool, bool, nvml.Return) {
		st.lock.Lock()
		defer st.lock.Unlock()
		// NVML does not report remapped rows of a GPU with MIG instances.
		if notSupported("remap") || st.MIGInstances > 0 {
			return 0, 0, false, false, nvml.ERROR_NOT_SUPPORTED
		}
		return st.RemapCorr, st.RemapUnc, st.RemapPending, st.RemapFailure, nvml.SUCCESS
	}
	dev.GetCurrPcieLinkWidthFunc = func() (int, nvml.Return) {
		st.lock.Lock()
		defer st.lock.Unlock()
		if notSupported("pcie") {
			return 0, nvml.ERROR_NOT_SUPPORTED
		}
		return st.WidthCurrent, nvml.SUCCESS
	}
	dev.GetMaxPcieLinkWidthFunc = func() (int, nvml.Return) {
		st.lock.Lock()
		defer st.lock.Unlock()
		if notSupported("pcie") {
			return 0, nvml.ERROR_NOT_SUPPORTED
		}
		return st.WidthMax, nvml.SUCCESS
	}
	dev.GetCurrPcieLinkGenerationFunc = func() (int, nvml.Return) { return st.Gen, nvml.SUCCESS }
	dev.GetMaxPcieLinkGenerationFunc = func() (int, nvml.Return) { return st.Gen, nvml.SUCCESS }
	dev.GetMaxMigDeviceCountFunc = func() (int, nvml.Return) { return 7, nvml.SUCCESS }
	dev.GetMigDeviceHandleByIndexFunc = func(j int) (nvml.Device, nvml.Return) {
		st.lock.Lock()
		defer st.lock.Unlock()
		if j < 0 || j >= st.MIGInstances {
			return nil, nvml.ERROR_NOT_FOUND
		}
		for len(st.migHandleCache) < st.MIGInstances {
			k := len(st.migHandleCache)
			uuid := fmt.Sprintf("MIG-%s-%d", strings.TrimPrefix(dev.UUID, "GPU-"), k)
			m := &mock.Device{
				GetUUIDFunc:              func() (string, nvml.Return) { return uuid, nvml.SUCCESS },
				GetGpuInstanceIdFunc:     func() (int, nvml.Return) { return k + 1, nvml.SUCCESS },
				GetComputeInstanceIdFunc: func() (int, nvml.Return) { return 0, nvml.SUCCESS },
			}
			st.migHandleCache = append(st.migHandleCache, m)
		}
		return st.migHandleCache[j], nvml.SUCCESS
	}
}

// Fault is one fault injected into one mock GPU.
type Fault struct {
	// GPU is the index.
	GPU int
	// Name is the fault: row-remap-pending, row-remap-failure,
	// ecc-uncorrectable=N, ecc-aggregate=N, ecc-disabled, pcie-width=N,
	// persistence-off, mig=N (MIG on with N instances),
	// not-supported=ecc|remap|pcie.
	Name string
	// Value is the number after '=', or the field for not-supported.
	Value string
}

// ParseFaults reads "gpu=3:row-remap-pending,gpu=5:ecc-uncorrectable=2".
func ParseFaults(s string) ([]Fault, error) {
	var out []Fault
	for _, item := range strings.Split(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		target, fault, ok := strings.Cut(item, ":")
		idx, err := strconv.Atoi(strings.TrimPrefix(strings.TrimSpace(target), "gpu="))
		if !ok || !strings.HasPrefix(strings.TrimSpace(target), "gpu=") || err != nil || idx < 0 {
			return nil, fmt.Errorf("NVML fault %q: want gpu=<index>:<fault>", item)
		}
		name, value, _ := strings.Cut(strings.TrimSpace(fault), "=")
		f := Fault{GPU: idx, Name: name, Value: value}
		if err := f.check(); err != nil {
			return nil, fmt.Errorf("NVML fault %q: %w", item, err)
		}
		out = append(out, f)
	}
	return out, nil
}

func (f Fault) check() error {
	switch f.Name {
	case "row-remap-pending", "row-remap-failure", "ecc-disabled", "persistence-off":
		return nil
	case "ecc-uncorrectable", "ecc-aggregate", "pcie-width", "mig":
		if n, err := strconv.Atoi(f.Value); err != nil || n < 0 {
			return fmt.Errorf("%s needs a count, as in %s=2", f.Name, f.Name)
		}
		return nil
	case "not-supported":
		switch f.Value {
		case "ecc", "remap", "pcie":
			return nil
		}
		return fmt.Errorf("not-supported needs ecc, remap or pcie")
	}
	return fmt.Errorf("unknown fault %q", f.Name)
}

// ApplyFaults injects faults into a server from NewMockServer.
func ApplyFaults(s *server.Server, faults []Fault) error {
	for _, f := range faults {
		if f.GPU >= len(s.Devices) {
			return fmt.Errorf("NVML fault on GPU %d: the mock has %d GPUs", f.GPU, len(s.Devices))
		}
		st := State(s.Devices[f.GPU])
		if st == nil {
			return fmt.Errorf("NVML fault on GPU %d: not a device of NewMockServer", f.GPU)
		}
		n, _ := strconv.Atoi(f.Value)
		st.lock.Lock()
		switch f.Name {
		case "row-remap-pending":
			st.RemapPending = true
			st.RemapUnc++
		case "row-remap-failure":
			st.RemapFailure = true
		case "ecc-uncorrectable":
			st.ECCVolatile = uint64(n)
			if st.ECCAggregate < uint64(n) {
				st.ECCAggregate = uint64(n)
			}
		case "ecc-aggregate":
			st.ECCAggregate = uint64(n)
		case "ecc-disabled":
			st.ECCEnabled = false
		case "persistence-off":
			st.Persistence = false
		case "pcie-width":
			st.WidthCurrent = n
		case "mig":
			st.MIGInstances = n
		case "not-supported":
			st.NotSupported[f.Value] = true
		}
		st.lock.Unlock()
		if f.Name == "mig" && n > 0 {
			dev := s.Devices[f.GPU].(*server.Device)
			dev.Lock()
			dev.MigMode = nvml.DEVICE_MIG_ENABLE
			dev.Unlock()
		}
	}
	return nil
}
