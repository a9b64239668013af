package nvmldriver

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/plugins/internal/gpu"
)

const demoFaults = "gpu=3:row-remap-pending,gpu=5:ecc-uncorrectable=2"

func snapshot(t *testing.T, d *Driver) []gpu.GPU {
	t.Helper()
	gs, st, _ := d.Snapshot(context.Background())
	require.True(t, st.Answered, st.Reason)
	require.Len(t, gs, 8)
	return gs
}

// Two processes that open the same mock source with the same state file see
// the same GPUs: the go-nvml mock draws UUIDs at random, the file keeps
// them; and the faults seed a new file only.
func TestMockStateFileIsSharedAndSeededOnce(t *testing.T) {
	state := filepath.Join(t.TempDir(), "gpus.json")
	a, err := OpenState("mock:dgxh200", demoFaults, state)
	require.NoError(t, err)
	defer a.Close()
	b, err := OpenState("mock:dgxh200", "gpu=1:pcie-width=8", state)
	require.NoError(t, err)
	defer b.Close()
	ga, gb := snapshot(t, a), snapshot(t, b)
	for i := range ga {
		require.Equal(t, ga[i].UUID, gb[i].UUID, "GPU %d", i)
	}
	require.True(t, gb[3].RemappedRows.Pending, "the first opener's faults are the file's")
	require.Equal(t, uint64(2), *gb[5].ECC.UncorrectableVolatile)
	require.Equal(t, 16, gb[1].PCIe.WidthCurrent, "a later opener's faults do not apply to an existing file")

	// Without a file, each open draws new UUIDs: the reason for the file.
	c, err := Open("mock:dgxh200", "")
	require.NoError(t, err)
	defer c.Close()
	require.NotEqual(t, ga[0].UUID, snapshot(t, c)[0].UUID)
}

// A reset in one process (the mock nvidia-smi's) is what the next Snapshot
// of another, long-lived one (the nvml plugin's) reads: the pending row
// remap cleared, the remapped row still counted, the volatile ECC count of
// the reset GPU back to 0, every other GPU as it was.
func TestMockResetInOneProcessShowsInAnothersNextSnapshot(t *testing.T) {
	state := filepath.Join(t.TempDir(), "gpus.json")
	plugin, err := OpenState("mock:dgxh200", demoFaults+",gpu=3:ecc-uncorrectable=4", state)
	require.NoError(t, err)
	defer plugin.Close()
	before := snapshot(t, plugin)
	require.True(t, before[3].RemappedRows.Pending)

	smi, err := OpenState("mock:dgxh200", "", state)
	require.NoError(t, err)
	defer smi.Close()
	srv := smi.MockServer()
	require.NotNil(t, srv)
	file := MockFile{Path: state, Model: "dgxh200"}
	dev := srv.Devices[3]
	// Persistence mode holds the GPU: the reset is refused, nothing changes.
	require.ErrorIs(t, file.Update(srv, func() error { return ResetMock(dev) }), ErrMockInUse)
	require.True(t, snapshot(t, plugin)[3].RemappedRows.Pending)

	require.NoError(t, file.Update(srv, func() error { return SetMockPersistence(dev, false) }))
	require.NoError(t, file.Update(srv, func() error { return ResetMock(dev) }))
	require.NoError(t, file.Update(srv, func() error { return SetMockPersistence(dev, true) }))

	after := snapshot(t, plugin)
	require.Equal(t, &gpu.RemappedRows{Uncorrectable: 1}, after[3].RemappedRows)
	require.Equal(t, uint64(0), *after[3].ECC.UncorrectableVolatile)
	require.Equal(t, uint64(4), *after[3].ECC.UncorrectableAggregate, "the aggregate counter survives a reset")
	require.True(t, *after[3].PersistenceMode)
	require.Equal(t, uint64(2), *after[5].ECC.UncorrectableVolatile, "GPU 5 was not reset")
	for i := range before {
		require.Equal(t, before[i].UUID, after[i].UUID)
	}
}

// A state file that is not one says what is wrong with it, by path.
func TestMockStateFileErrorsNameTheFile(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.json")
	require.NoError(t, os.WriteFile(bad, []byte("{not json"), 0o600))
	_, err := OpenState("mock:dgxh200", "", bad)
	require.ErrorContains(t, err, "mock GPU state "+bad)

	h200 := filepath.Join(dir, "h200.json")
	d, err := OpenState("mock:dgxh200", "", h200)
	require.NoError(t, err)
	d.Close()
	_, err = OpenState("mock:dgxa100", "", h200)
	require.EqualError(t, err, "mock GPU state "+h200+" is of a mock:dgxh200, not mock:dgxa100: remove it to start again")

	_, err = OpenState("nvml", "", h200)
	require.ErrorContains(t, err, "applies to a mock source only")

	// A file that went bad after the open: the next Snapshot says so
	// instead of answering from what it read before.
	d, err = OpenState("mock:dgxh200", "", h200)
	require.NoError(t, err)
	defer d.Close()
	require.NoError(t, os.WriteFile(h200, []byte(`{"model":"dgxh200","gpus":[]}`), 0o600))
	_, st, _ := d.Snapshot(context.Background())
	require.False(t, st.Answered)
	require.Equal(t, "mock GPU state "+h200+" has 0 GPUs, the mock:dgxh200 has 8", st.Reason)
}

// FuzzMockFileLoad: whatever a state file holds, Load either reads it into
// the mock's eight GPUs or says what is wrong; it never panics, and what it
// read, a Snapshot answers.
func FuzzMockFileLoad(f *testing.F) {
	f.Add([]byte(`{"model":"dgxh200","gpus":[]}`))
	f.Add([]byte(`{"model":"dgxa100"}`))
	f.Add([]byte(`not json`))
	f.Fuzz(func(t *testing.T, b []byte) {
		path := filepath.Join(t.TempDir(), "gpus.json")
		require.NoError(t, os.WriteFile(path, b, 0o600))
		srv, err := NewMockServer("dgxh200")
		require.NoError(t, err)
		if err := (MockFile{Path: path, Model: "dgxh200"}).Load(srv); err != nil {
			require.ErrorContains(t, err, "mock GPU state")
			return
		}
		d := New(srv, "mock:dgxh200")
		defer d.Close()
		_, st, _ := d.Snapshot(context.Background())
		require.True(t, st.Answered, st.Reason)
	})
}
