package nvml

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/plugins/internal/gpu"
	"github.com/better-compute/commands/plugins/internal/gpu/gputest"
	"github.com/better-compute/commands/plugins/nvml/manifest"
)

// captureNode is a node whose nvidia-smi answers what the GPUs of a real
// `nvidia-smi -q` capture reported, and whose kernel lists the same GPUs.
func captureNode(t *testing.T, capture string, kmsg []string) (*node, []gputest.SmiGPU) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", capture))
	require.NoError(t, err)
	gs, err := gputest.FromQ(string(b))
	require.NoError(t, err)
	root := gputest.NewRoot(t, "boot-1")
	for _, g := range gs {
		root.AddGPU(gputest.KernelGPU{Address: strings.ToLower(strings.TrimPrefix(g.BusID, "0000")), Model: g.Name, UUID: g.UUID, WidthCurrent: 16, WidthMax: 16})
	}
	return newNodeOn(t, root, gputest.Answer(gs), kmsg), gs
}

func (nd *node) diagnose(t *testing.T) Report {
	t.Helper()
	res := nd.run(t, manifest.KindDiagNVML, `{"refresh":true}`)
	var rep Report
	require.NoError(t, json.Unmarshal(res.Data, &rep), res.Message)
	return rep
}

// An H200 in MIG mode with active MIG devices reports "Remapped Rows : N/A"
// (a real capture): NVML does not report remapped rows of a GPU with active
// MIG instances, though the GPU remaps rows. The row-remap checks say so,
// not that the GPU lacks the feature.
func TestRowRemapChecksOfAnH200InMIGModeSayWhyTheyAreUnknown(t *testing.T) {
	nd, gs := captureNode(t, "q-590.48.01-h200-mig-masked.txt", nil)
	require.Len(t, gs, 1)
	require.Equal(t, "Enabled", gs[0].MIG)
	require.Equal(t, "[N/A]", gs[0].RemapPending)

	rep := nd.diagnose(t)
	require.Equal(t, StatusPass, find(t, rep, CheckNVMLInit, -1).Status)
	for _, name := range []string{CheckRowRemapPending, CheckRowRemapFailure} {
		c := find(t, rep, name, 0)
		require.Equal(t, StatusSkipped, c.Status, name)
		require.Equal(t, "skipped: unknown while MIG mode is on: the driver does not report row remapping of a GPU with active MIG instances (nvidia-smi reports [N/A]), although the GPU remaps rows; the kernel log shows no row-remapping XID (63, 64) this boot", c.Reason, name)
		require.NotContains(t, c.Reason, "not available on this GPU", name)
		require.Equal(t, "to read the row-remapping state, destroy the GPU's MIG instances (or disable MIG mode) once no allocation is live, then run diag.nvml again", c.Action, name)
	}
	inv := &gpu.Inventory{}
	raw, _, err := nd.host.Inventory(t.Context())
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(raw, inv))
	require.Equal(t, "skipped: unknown while MIG mode is on: the driver does not report row remapping of a GPU with active MIG instances (nvidia-smi reports [N/A]), although the GPU remaps rows",
		inv.GPUs[0].SkipReason(gpu.FieldRemappedRows), "the inventory bcd stores says why too")
}

// In MIG mode the kernel log is the evidence left: XID 63 (a row marked for
// remapping, activated by a reset) fails row-remap.pending, XID 64 (the row
// remapper could not record a remap) fails row-remap.failure.
func TestRowRemapInMIGModeFailsOnTheKernelsRowRemappingXIDs(t *testing.T) {
	nd, _ := captureNode(t, "q-590.48.01-h200-mig-masked.txt", []string{
		"NVRM: Xid (PCI:0000:83:00): 63, pid='<unknown>', name=<unknown>, Row Remapper: New row (0x00000000000d2a40) marked for remapping, reset gpu to activate.",
	})
	rep := nd.diagnose(t)
	require.Equal(t, StatusFail, rep.Status)
	label := "GPU 0 (GPU-00000000-0000-0000-0000-000000000000, 0000:83:00)"
	require.Equal(t, Check{
		Check:  CheckRowRemapPending,
		GPU:    &GPURef{Index: 0, UUID: "GPU-00000000-0000-0000-0000-000000000000", BusID: "0000:83:00"},
		Status: StatusFail,
		Reason: label + " logged XID 63 this boot: a row was marked for remapping, which takes effect only after a GPU reset (the driver does not report row remapping in MIG mode)",
		Action: "reset the GPU (gpu.reset) once no allocation is live",
	}, find(t, rep, CheckRowRemapPending, 0))
	require.Equal(t, StatusSkipped, find(t, rep, CheckRowRemapFailure, 0).Status, "XID 63 says nothing of a failure")

	nd, _ = captureNode(t, "q-590.48.01-h200-mig-masked.txt", []string{
		"NVRM: Xid (PCI:0000:83:00): 64, pid='<unknown>', name=<unknown>, Row Remapper: Failed to record a new row remapping.",
	})
	c := find(t, nd.diagnose(t), CheckRowRemapFailure, 0)
	require.Equal(t, StatusFail, c.Status)
	require.Equal(t, label+" logged XID 64 this boot: the row remapper failed to record a remap (the driver does not report row remapping in MIG mode)", c.Reason)
	require.Equal(t, "drain the GPU and reset it (gpu.reset), then destroy its MIG instances and run diag.nvml again: replace the GPU (RMA) if it reports a remapping failure", c.Action)
}

// The same driver with MIG off reports the counters (a real H100 capture,
// and eight H100s of another driver): the checks pass on them.
func TestRowRemapChecksPassOnRealH100CapturesWithMIGOff(t *testing.T) {
	for _, capture := range []string{"q-590.48.01-h100-80gb-hbm3-masked.txt", "q-535.161.08-h100-80gb-hbm3-x8.txt"} {
		t.Run(capture, func(t *testing.T) {
			nd, gs := captureNode(t, capture, nil)
			rep := nd.diagnose(t)
			require.Equal(t, StatusPass, rep.Status, "%+v", rep.Failed())
			for i := range gs {
				require.Equal(t, "no row remap pending (0 correctable, 0 uncorrectable rows remapped)", find(t, rep, CheckRowRemapPending, i).Reason)
				require.Equal(t, "no row remapping failure", find(t, rep, CheckRowRemapFailure, i).Reason)
			}
		})
	}
}
