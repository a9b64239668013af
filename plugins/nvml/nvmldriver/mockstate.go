package nvmldriver

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"syscall"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
)

// MockFile keeps a mock server's GPUs in a file, so that every process that
// opens the same mock source with the same file sees the same GPUs: the
// nvml plugin (its NVML), the mock nvidia-smi that gpu.reset runs
// (plugins/nvml/mocksmi), and a restarted plugin after a node's reboot. The
// faults seed a new file only; once written, the file is the mock GPUs'
// state, and a reset through the mock nvidia-smi changes it there, where
// the next inventory reads it. Writers hold an flock on Path+".lock" and
// replace the file by rename, so a reader never sees half a file.
type MockFile struct {
	// Path is the JSON file.
	Path string
	// Model is the mock server's model (dgxh200, ...), checked on load.
	Model string
}

// mockDoc is the file's content.
type mockDoc struct {
	Model string       `json:"model"`
	GPUs  []mockGPUDoc `json:"gpus"`
}

// mockGPUDoc is one GPU of the file: its identity, which the go-nvml mock
// draws at random in every process, and its MockState.
type mockGPUDoc struct {
	Index        int      `json:"index"`
	UUID         string   `json:"uuid"`
	Persistence  bool     `json:"persistence"`
	ECCEnabled   bool     `json:"eccEnabled"`
	ECCVolatile  uint64   `json:"eccUncorrectableVolatile"`
	ECCAggregate uint64   `json:"eccUncorrectableAggregate"`
	RemapCorr    int      `json:"remappedRowsCorrectable"`
	RemapUnc     int      `json:"remappedRowsUncorrectable"`
	RemapPending bool     `json:"remapPending"`
	RemapFailure bool     `json:"remapFailure"`
	WidthCurrent int      `json:"pcieWidthCurrent"`
	WidthMax     int      `json:"pcieWidthMax"`
	Gen          int      `json:"pcieGen"`
	MIGInstances int      `json:"migInstances"`
	NotSupported []string `json:"notSupported,omitempty"`
}

// Init loads the file into s, or, when there is none yet, applies faults
// to s and writes the file, under the lock.
func (m MockFile) Init(s *server.Server, faults []Fault) error {
	return m.locked(func() error {
		err := m.Load(s)
		if !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		if err := ApplyFaults(s, faults); err != nil {
			return err
		}
		return m.save(s)
	})
}

// Update loads the file into s, runs change, and writes s back, under the
// lock: what the mock nvidia-smi's actions (persistence mode, a reset) do.
func (m MockFile) Update(s *server.Server, change func() error) error {
	return m.locked(func() error {
		if err := m.Load(s); err != nil {
			return err
		}
		if err := change(); err != nil {
			return err
		}
		return m.save(s)
	})
}

// Load reads the file into s's devices (their UUIDs and MockStates). A
// missing file is an error that wraps fs.ErrNotExist.
func (m MockFile) Load(s *server.Server) error {
	b, err := os.ReadFile(m.Path)
	if err != nil {
		return fmt.Errorf("mock GPU state: %w", err)
	}
	var doc mockDoc
	if err := json.Unmarshal(b, &doc); err != nil {
		return fmt.Errorf("mock GPU state %s: %w", m.Path, err)
	}
	if doc.Model != m.Model {
		return fmt.Errorf("mock GPU state %s is of a mock:%s, not mock:%s: remove it to start again", m.Path, doc.Model, m.Model)
	}
	if len(doc.GPUs) != len(s.Devices) {
		return fmt.Errorf("mock GPU state %s has %d GPUs, the mock:%s has %d", m.Path, len(doc.GPUs), m.Model, len(s.Devices))
	}
	for i, g := range doc.GPUs {
		if g.Index != i || g.UUID == "" {
			return fmt.Errorf("mock GPU state %s: GPU %d is listed as index %d with uuid %q", m.Path, i, g.Index, g.UUID)
		}
		dev := s.Devices[i].(*server.Device)
		st := State(dev)
		if st == nil {
			return fmt.Errorf("mock GPU state: GPU %d is not a device of NewMockServer", i)
		}
		dev.Lock()
		dev.UUID = g.UUID
		dev.MigMode = nvml.DEVICE_MIG_DISABLE
		if g.MIGInstances > 0 {
			dev.MigMode = nvml.DEVICE_MIG_ENABLE
		}
		dev.Unlock()
		st.lock.Lock()
		st.Persistence, st.ECCEnabled, st.ECCVolatile, st.ECCAggregate = g.Persistence, g.ECCEnabled, g.ECCVolatile, g.ECCAggregate
		st.RemapCorr, st.RemapUnc, st.RemapPending, st.RemapFailure = g.RemapCorr, g.RemapUnc, g.RemapPending, g.RemapFailure
		st.WidthCurrent, st.WidthMax, st.Gen = g.WidthCurrent, g.WidthMax, g.Gen
		if st.MIGInstances != g.MIGInstances {
			st.migHandleCache = nil
		}
		st.MIGInstances = g.MIGInstances
		st.NotSupported = map[string]bool{}
		for _, f := range g.NotSupported {
			st.NotSupported[f] = true
		}
		st.lock.Unlock()
	}
	return nil
}

// save writes s to the file through a temporary file and a rename.
func (m MockFile) save(s *server.Server) error {
	doc := mockDoc{Model: m.Model}
	for i, d := range s.Devices {
		dev := d.(*server.Device)
		st := State(dev)
		if st == nil {
			return fmt.Errorf("mock GPU state: GPU %d is not a device of NewMockServer", i)
		}
		dev.RLock()
		g := mockGPUDoc{Index: i, UUID: dev.UUID}
		dev.RUnlock()
		st.lock.Lock()
		g.Persistence, g.ECCEnabled, g.ECCVolatile, g.ECCAggregate = st.Persistence, st.ECCEnabled, st.ECCVolatile, st.ECCAggregate
		g.RemapCorr, g.RemapUnc, g.RemapPending, g.RemapFailure = st.RemapCorr, st.RemapUnc, st.RemapPending, st.RemapFailure
		g.WidthCurrent, g.WidthMax, g.Gen, g.MIGInstances = st.WidthCurrent, st.WidthMax, st.Gen, st.MIGInstances
		for f, on := range st.NotSupported {
			if on {
				g.NotSupported = append(g.NotSupported, f)
			}
		}
		st.lock.Unlock()
		sort.Strings(g.NotSupported)
		doc.GPUs = append(doc.GPUs, g)
	}
	b, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return fmt.Errorf("mock GPU state: %w", err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(m.Path), filepath.Base(m.Path)+".*.tmp")
	if err != nil {
		return fmt.Errorf("mock GPU state: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(append(b, '\n')); err != nil {
		_ = tmp.Close()
		return fmt.Errorf("mock GPU state: writing %s: %w", tmp.Name(), err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("mock GPU state: writing %s: %w", tmp.Name(), err)
	}
	if err := os.Rename(tmp.Name(), m.Path); err != nil {
		return fmt.Errorf("mock GPU state: %w", err)
	}
	return nil
}

// locked runs fn holding an exclusive flock on Path+".lock".
func (m MockFile) locked(fn func() error) error {
	f, err := os.OpenFile(m.Path+".lock", os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return fmt.Errorf("mock GPU state: %w", err)
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		return fmt.Errorf("mock GPU state: locking %s: %w", f.Name(), err)
	}
	defer func() { _ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN) }()
	return fn()
}

// ErrMockInUse is ResetMock's refusal of a GPU that persistence mode holds,
// as the driver refuses a reset while a client holds the GPU.
var ErrMockInUse = errors.New("in use by another client")

// ResetMock does to a mock GPU what `nvidia-smi --gpu-reset` does to a real
// one: a pending row remap takes effect (pending clears; the remapped row
// stays counted), and the volatile ECC counters, which count since the
// driver loaded the GPU, start again at 0. A failed row remap, the
// aggregate counters and everything else stay. With persistence mode on it
// refuses (ErrMockInUse) and changes nothing: gpu.reset turns it off first.
func ResetMock(d nvml.Device) error {
	st := State(d)
	if st == nil {
		return fmt.Errorf("not a device of NewMockServer")
	}
	st.lock.Lock()
	defer st.lock.Unlock()
	if st.Persistence {
		return ErrMockInUse
	}
	st.RemapPending = false
	st.ECCVolatile = 0
	return nil
}

// SetMockPersistence sets a mock GPU's persistence mode, as `nvidia-smi -pm`.
func SetMockPersistence(d nvml.Device, on bool) error {
	st := State(d)
	if st == nil {
		return fmt.Errorf("not a device of NewMockServer")
	}
	st.lock.Lock()
	defer st.lock.Unlock()
	st.Persistence = on
	return nil
}
