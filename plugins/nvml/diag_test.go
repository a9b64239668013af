package nvml

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/plugins/internal/gpu"
	"github.com/better-compute/commands/plugins/internal/gpu/gputest"
)

// healthy is an inventory of n healthy GPUs that nvidia-smi, NVML and the
// kernel all list, with an empty kernel log.
func healthy(n int) *gpu.Inventory {
	inv := &gpu.Inventory{SchemaVersion: gpu.SchemaVersion, DriverVersion: "550.54.15"}
	inv.Sources.NVML = gpu.SourceStatus{Answered: true, GPUs: n}
	inv.Sources.NvidiaSmi = gpu.SourceStatus{Answered: true, GPUs: n, ExitCode: gpu.Ptr(0)}
	inv.Sources.Kernel = gpu.SourceStatus{Answered: true, GPUs: n}
	inv.Sources.Kmsg = gpu.SourceStatus{Answered: true}
	for i := 0; i < n; i++ {
		inv.GPUs = append(inv.GPUs, gpu.GPU{
			Index: i, UUID: gputest.UUID(i), BusID: gputest.BusID(i), Name: "NVIDIA H200",
			PersistenceMode: gpu.Ptr(true),
			ECC:             &gpu.ECC{Enabled: gpu.Ptr(true), UncorrectableVolatile: gpu.Ptr(uint64(0)), UncorrectableAggregate: gpu.Ptr(uint64(0))},
			RemappedRows:    &gpu.RemappedRows{},
			PCIe:            &gpu.PCIe{WidthCurrent: 16, WidthMax: 16, WidthSamples: []int{16, 16}, SysfsWidthCurrent: 16, SysfsWidthMax: 16, GenCurrent: 5, GenMax: 5},
			SeenBy:          []string{gpu.SourceNVML, gpu.SourceNvidiaSmi, gpu.SourceKernel},
		})
	}
	return inv
}

// find returns the one check named name for GPU index (-1: node-level).
func find(t *testing.T, r Report, name string, index int) Check {
	t.Helper()
	var found []Check
	for _, c := range r.Checks {
		if c.Check != name {
			continue
		}
		if (index < 0 && c.GPU == nil) || (c.GPU != nil && c.GPU.Index == index) {
			found = append(found, c)
		}
	}
	require.Len(t, found, 1, "check %s for GPU %d in %+v", name, index, r.Checks)
	return found[0]
}

func TestHealthyNodePassesEveryCheckInOrder(t *testing.T) {
	r := Diagnose(healthy(2), DiagOptions{ExpectedCount: 2})
	require.Equal(t, StatusPass, r.Status)
	var names []string
	for _, c := range r.Checks {
		names = append(names, c.Check)
		require.Equal(t, StatusPass, c.Status, "%+v", c)
		require.Empty(t, c.Action)
	}
	require.Equal(t, []string{
		"nvml.init", "gpus.visible", "gpus.count",
		"ecc.uncorrectable", "row-remap.pending", "row-remap.failure", "pcie.link", "xid.recent",
		"ecc.uncorrectable", "row-remap.pending", "row-remap.failure", "pcie.link", "xid.recent",
	}, names)
	require.Equal(t, Check{Check: CheckNVMLInit, Status: StatusPass, Reason: "nvidia-smi answered for 2 GPUs (driver 550.54.15)"}, r.Checks[0])
	require.Equal(t, Check{Check: CheckGPUsVisible, Status: StatusPass, Reason: "2 GPUs visible to the driver"}, r.Checks[1])
	require.Equal(t, Check{Check: CheckGPUsCount, Status: StatusPass, Reason: "2 GPUs visible, as expected"}, r.Checks[2])
	ref := &GPURef{Index: 1, UUID: gputest.UUID(1), BusID: gputest.BusID(1)}
	require.Equal(t, Check{Check: CheckECCUncorrectable, GPU: ref, Status: StatusPass, Reason: "no uncorrectable ECC errors since the driver loaded (volatile 0; aggregate 0)"}, find(t, r, CheckECCUncorrectable, 1))
	require.Equal(t, "no row remap pending (0 correctable, 0 uncorrectable rows remapped)", find(t, r, CheckRowRemapPending, 1).Reason)
	require.Equal(t, "no row remapping failure", find(t, r, CheckRowRemapFailure, 1).Reason)
	require.Equal(t, "PCIe link at its full width, x16, Gen5", find(t, r, CheckPCIeLink, 1).Reason)
	require.Equal(t, "no XID this boot that needs an action", find(t, r, CheckXIDRecent, 1).Reason)
}

// "nvml.init passes only when the driver's management interface
// (nvidia-smi) answered, not when the kernel driver alone names the GPUs"
func TestNVMLInitFailsWhenOnlyTheKernelNamesTheGPUs(t *testing.T) {
	inv := healthy(8)
	inv.Sources.NvidiaSmi = gpu.SourceStatus{Reason: "the NVIDIA driver is not loaded (nvidia-smi exit 9)", ExitCode: gpu.Ptr(9)}
	inv.Sources.NVML = gpu.SourceStatus{Reason: "NVML did not initialise (nvml): ERROR_DRIVER_NOT_LOADED: the NVIDIA kernel module is not loaded"}
	for i := range inv.GPUs {
		inv.GPUs[i].SeenBy = []string{gpu.SourceKernel}
	}
	r := Diagnose(inv, DiagOptions{})
	require.Equal(t, StatusFail, r.Status)
	require.Equal(t, Check{
		Check:  CheckNVMLInit,
		Status: StatusFail,
		Reason: "nvidia-smi did not answer: the NVIDIA driver is not loaded (nvidia-smi exit 9); the kernel driver alone names 8 GPUs, which does not prove the driver's management interface works",
		Action: "load the NVIDIA kernel module (modprobe nvidia) or reinstall the driver, then run diag.nvml again",
	}, r.Checks[0])
	require.Equal(t, Check{
		Check:  CheckGPUsVisible,
		Status: StatusFail,
		Reason: "no GPU is visible to NVML or nvidia-smi although the kernel names 8 GPUs",
		Action: "fix the driver first (see nvml.init), then run diag.nvml again",
	}, r.Checks[1])
}

// NVML answering is not enough either: nvml.init wants nvidia-smi.
func TestNVMLInitFailsWhenNvidiaSmiHangsEvenIfNVMLAnswered(t *testing.T) {
	inv := healthy(1)
	inv.Sources.NvidiaSmi = gpu.SourceStatus{Reason: "nvidia-smi hung and was killed after 30s (a GSP or driver hang; see XID 119)"}
	c := Diagnose(inv, DiagOptions{}).Checks[0]
	require.Equal(t, StatusFail, c.Status)
	require.Equal(t, "nvidia-smi did not answer: nvidia-smi hung and was killed after 30s (a GSP or driver hang; see XID 119); the kernel driver alone names 1 GPU, which does not prove the driver's management interface works", c.Reason)
	require.Equal(t, "reboot the node: the driver or the GPU's firmware hangs (look for XID 119 in the kernel log)", c.Action)
}

func TestGPUsVisibleFailsForAGPUOnlyTheKernelLists(t *testing.T) {
	inv := healthy(3)
	inv.GPUs[2].SeenBy = []string{gpu.SourceKernel}
	r := Diagnose(inv, DiagOptions{})
	require.Equal(t, Check{
		Check:  CheckGPUsVisible,
		GPU:    &GPURef{Index: 2, UUID: gputest.UUID(2), BusID: gputest.BusID(2)},
		Status: StatusFail,
		Reason: "GPU 2 (" + gputest.UUID(2) + ", 0000:38:00) is on the PCI bus but neither NVML nor nvidia-smi lists it",
		Action: "look for XID 79 (fallen off the bus) in the kernel log and reboot the node; replace the GPU if it stays missing",
	}, find(t, r, CheckGPUsVisible, 2))
}

func TestGPUsCount(t *testing.T) {
	inv := healthy(7)
	r := Diagnose(inv, DiagOptions{ExpectedCount: 8})
	require.Equal(t, StatusFail, r.Status)
	require.Equal(t, Check{
		Check:  CheckGPUsCount,
		Status: StatusFail,
		Reason: "7 GPUs visible; this node should have 8",
		Action: "find the missing GPU (compare the kernel's PCI devices with nvidia-smi -L, look for XID 79) and reboot the node or replace the GPU",
	}, find(t, r, CheckGPUsCount, -1))
	c := find(t, Diagnose(inv, DiagOptions{}), CheckGPUsCount, -1)
	require.Equal(t, StatusSkipped, c.Status)
	require.Equal(t, "skipped: no expected GPU count (set expectedCount in the payload or the node's expected GPU count)", c.Reason)
	require.Equal(t, StatusPass, find(t, Diagnose(inv, DiagOptions{ExpectedCount: 7}), CheckGPUsCount, -1).Status)
}

// ecc.uncorrectable gates on the volatile count; the aggregate informs.
func TestECCUncorrectable(t *testing.T) {
	inv := healthy(4)
	inv.GPUs[3].ECC.UncorrectableVolatile = gpu.Ptr(uint64(2))
	inv.GPUs[3].ECC.UncorrectableAggregate = gpu.Ptr(uint64(5))
	inv.GPUs[2].ECC.UncorrectableAggregate = gpu.Ptr(uint64(9)) // old errors only
	r := Diagnose(inv, DiagOptions{})
	require.Equal(t, Check{
		Check:  CheckECCUncorrectable,
		GPU:    &GPURef{Index: 3, UUID: gputest.UUID(3), BusID: "0000:48:00"},
		Status: StatusFail,
		Reason: "GPU 3 (" + gputest.UUID(3) + ", 0000:48:00) has 2 uncorrectable ECC errors since the driver loaded (volatile 2; aggregate 5)",
		Action: "drain the GPU and reset it (gpu.reset); replace it if uncorrectable errors come back",
	}, find(t, r, CheckECCUncorrectable, 3))
	c := find(t, r, CheckECCUncorrectable, 2)
	require.Equal(t, StatusPass, c.Status)
	require.Equal(t, "no uncorrectable ECC errors since the driver loaded (volatile 0; aggregate 9)", c.Reason)
}

// NOT_SUPPORTED -> skipped with its reason, never a silent pass.
func TestNotSupportedFieldsAreSkippedWithTheirReason(t *testing.T) {
	inv := healthy(1)
	g := &inv.GPUs[0]
	g.ECC, g.RemappedRows, g.PCIe = nil, nil, nil
	g.Skip(gpu.FieldECCErrors, "NVML reports NOT_SUPPORTED for this GPU")
	g.Skip(gpu.FieldRemappedRows, "NVML reports NOT_SUPPORTED for this GPU")
	g.Skip(gpu.FieldPCIeLink, "not available on this GPU (nvidia-smi reports [N/A])")
	r := Diagnose(inv, DiagOptions{})
	require.Equal(t, StatusPass, r.Status, "a skip is not a failure")
	for name, want := range map[string]string{
		CheckECCUncorrectable: "skipped: NVML reports NOT_SUPPORTED for this GPU",
		CheckRowRemapPending:  "skipped: NVML reports NOT_SUPPORTED for this GPU",
		CheckRowRemapFailure:  "skipped: NVML reports NOT_SUPPORTED for this GPU",
		CheckPCIeLink:         "skipped: not available on this GPU (nvidia-smi reports [N/A])",
	} {
		c := find(t, r, name, 0)
		require.Equal(t, StatusSkipped, c.Status, name)
		require.Equal(t, want, c.Reason, name)
	}
	// No source at all, and ECC disabled.
	g.Skipped = nil
	require.Equal(t, "skipped: no source reported the ECC error counts", find(t, Diagnose(inv, DiagOptions{}), CheckECCUncorrectable, 0).Reason)
	g.ECC = &gpu.ECC{Enabled: gpu.Ptr(false)}
	require.Equal(t, "skipped: ECC is disabled on this GPU", find(t, Diagnose(inv, DiagOptions{}), CheckECCUncorrectable, 0).Reason)
}

func TestRowRemapPending(t *testing.T) {
	inv := healthy(4)
	inv.GPUs[3].RemappedRows = &gpu.RemappedRows{Uncorrectable: 1, Pending: true}
	r := Diagnose(inv, DiagOptions{})
	require.Equal(t, Check{
		Check:  CheckRowRemapPending,
		GPU:    &GPURef{Index: 3, UUID: gputest.UUID(3), BusID: "0000:48:00"},
		Status: StatusFail,
		Reason: "GPU 3 (" + gputest.UUID(3) + ", 0000:48:00) has a row remap pending, which takes effect only after a GPU reset (0 correctable, 1 uncorrectable rows remapped)",
		Action: "reset the GPU (gpu.reset) once no allocation is live",
	}, find(t, r, CheckRowRemapPending, 3))
	require.Equal(t, StatusPass, find(t, r, CheckRowRemapFailure, 3).Status)
	require.Equal(t, StatusPass, find(t, r, CheckRowRemapPending, 2).Status)
}

func TestRowRemapFailure(t *testing.T) {
	inv := healthy(1)
	inv.GPUs[0].RemappedRows = &gpu.RemappedRows{Uncorrectable: 8, Failure: true}
	r := Diagnose(inv, DiagOptions{})
	require.Equal(t, Check{
		Check:  CheckRowRemapFailure,
		GPU:    &GPURef{Index: 0, UUID: gputest.UUID(0), BusID: "0000:18:00"},
		Status: StatusFail,
		Reason: "GPU 0 (" + gputest.UUID(0) + ", 0000:18:00) failed to remap a row: a memory bank has no spare rows left (8 uncorrectable rows remapped)",
		Action: "drain the GPU and replace it (RMA); a reset does not fix a remapping failure",
	}, find(t, r, CheckRowRemapFailure, 0))
}

// pcie.link: a narrow width must persist across two samples or show in
// sysfs; an idle GPU narrowing its link in one sample passes. Speed is
// never judged.
func TestPCIeLink(t *testing.T) {
	label := "GPU 0 (" + gputest.UUID(0) + ", 0000:18:00)"
	action := "drain the GPU, then reseat it or check its riser and cable; a reboot retrains the link"
	for _, tc := range []struct {
		name   string
		pcie   gpu.PCIe
		status string
		reason string
	}{
		{"two samples", gpu.PCIe{WidthCurrent: 8, WidthMax: 16, WidthSamples: []int{8, 8}, SysfsWidthCurrent: 16, SysfsWidthMax: 16}, StatusFail,
			label + " PCIe link runs at x8 of x16 lanes (in 2 samples from the driver)"},
		{"sysfs", gpu.PCIe{WidthCurrent: 8, WidthMax: 16, WidthSamples: []int{8}, SysfsWidthCurrent: 8, SysfsWidthMax: 16}, StatusFail,
			label + " PCIe link runs at x8 of x16 lanes (confirmed by sysfs: x8 of x16)"},
		{"sysfs only", gpu.PCIe{SysfsWidthCurrent: 4, SysfsWidthMax: 16}, StatusFail,
			label + " PCIe link runs at x4 of x16 lanes (confirmed by sysfs: x4 of x16)"},
		{"one sample", gpu.PCIe{WidthCurrent: 8, WidthMax: 16, WidthSamples: []int{8, 16}, SysfsWidthCurrent: 16, SysfsWidthMax: 16}, StatusPass,
			"PCIe link at x8 of x16 in one sample only; an idle GPU may narrow its link, so this is not judged until it persists"},
		{"slow but wide", gpu.PCIe{WidthCurrent: 16, WidthMax: 16, WidthSamples: []int{16, 16}, GenCurrent: 1, GenMax: 5, SpeedCurrent: "2.5 GT/s PCIe", SpeedMax: "32.0 GT/s PCIe"}, StatusPass,
			"PCIe link at its full width, x16, 2.5 GT/s PCIe"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inv := healthy(1)
			p := tc.pcie
			inv.GPUs[0].PCIe = &p
			c := find(t, Diagnose(inv, DiagOptions{}), CheckPCIeLink, 0)
			require.Equal(t, tc.status, c.Status)
			require.Equal(t, tc.reason, c.Reason)
			if tc.status == StatusFail {
				require.Equal(t, action, c.Action)
			} else {
				require.Empty(t, c.Action)
			}
		})
	}
}

func TestXIDRecent(t *testing.T) {
	inv := healthy(3)
	inv.GPUs[0].XIDs = []gpu.XIDCondition{
		{XID: 13, BusID: gputest.BusID(0), Action: gpu.ActionInformation, Ignored: true, Count: 629},
		{XID: 94, BusID: gputest.BusID(0), Action: gpu.ActionInformation, Count: 3},
	}
	inv.GPUs[1].XIDs = []gpu.XIDCondition{{XID: 48, BusID: gputest.BusID(1), Action: gpu.ActionReset, Count: 1, Message: "DBE"}}
	inv.GPUs[2].XIDs = []gpu.XIDCondition{
		{XID: 48, BusID: gputest.BusID(2), Action: gpu.ActionReset, Count: 1, Message: "DBE"},
		{XID: 79, BusID: gputest.BusID(2), Action: gpu.ActionReboot, Count: 2, Message: "GPU has fallen off the bus."},
	}
	r := Diagnose(inv, DiagOptions{})
	c := find(t, r, CheckXIDRecent, 0)
	require.Equal(t, StatusPass, c.Status)
	require.Equal(t, "no XID this boot that needs an action; information only: XID 94 ×3 (information); ignored application XIDs: XID 13 ×629 (information)", c.Reason)

	require.Equal(t, Check{
		Check:  CheckXIDRecent,
		GPU:    &GPURef{Index: 1, UUID: gputest.UUID(1), BusID: "0000:28:00"},
		Status: StatusFail,
		Reason: "GPU 1 (" + gputest.UUID(1) + ", 0000:28:00) logged XID 48 ×1 (reset) this boot (last: XID 48: DBE)",
		Action: "reset the GPU (gpu.reset) once no allocation is live; reboot the node if the XID comes back",
	}, find(t, r, CheckXIDRecent, 1))

	// XID 79 needs a reboot and never a reset.
	c = find(t, r, CheckXIDRecent, 2)
	require.Equal(t, StatusFail, c.Status)
	require.Equal(t, "GPU 2 ("+gputest.UUID(2)+", 0000:38:00) logged XID 48 ×1 (reset), XID 79 ×2 (reboot) this boot (last: XID 79: GPU has fallen off the bus.)", c.Reason)
	require.Equal(t, "reboot the node (power-cycle it if the GPU does not come back); a GPU reset cannot recover XID 79", c.Action)
	require.NotContains(t, c.Action, "gpu.reset")
}

func TestXIDRecentOfAGPUNoSourceListsAndAnUnreadableLog(t *testing.T) {
	inv := healthy(1)
	inv.UnmatchedXIDs = []gpu.XIDCondition{{XID: 79, BusID: "0000:91:00", Action: gpu.ActionReboot, Count: 1, Message: "GPU has fallen off the bus."}}
	r := Diagnose(inv, DiagOptions{})
	require.Equal(t, StatusFail, r.Status)
	var un Check
	for _, x := range r.Checks {
		if x.Check == CheckXIDRecent && x.GPU != nil && x.GPU.BusID == "0000:91:00" {
			un = x
		}
	}
	require.Equal(t, StatusFail, un.Status)
	require.Equal(t, "the GPU at 0000:91:00 (listed by no source) logged XID 79 ×1 (reboot) this boot (last: XID 79: GPU has fallen off the bus.)", un.Reason)

	inv = healthy(1)
	inv.Sources.Kmsg = gpu.SourceStatus{Reason: "opening kernel log /dev/kmsg: permission denied"}
	c := find(t, Diagnose(inv, DiagOptions{}), CheckXIDRecent, 0)
	require.Equal(t, StatusSkipped, c.Status)
	require.Equal(t, "skipped: the kernel log could not be read: opening kernel log /dev/kmsg: permission denied", c.Reason)
}

// A GPU in MIG mode whose remapped rows are unknown for another reason (a
// hung nvidia-smi) keeps that reason: MIG is blamed only when the driver
// said N/A or NOT_SUPPORTED because of it, and the kernel log is read either way.
func TestRowRemapInMIGModeKeepsAReasonThatIsNotMIGs(t *testing.T) {
	inv := healthy(1)
	g := &inv.GPUs[0]
	g.MIG, g.RemappedRows = &gpu.MIG{Enabled: true}, nil
	g.Skip(gpu.FieldRemappedRows, "nvidia-smi hung and was killed after 30s (a GSP or driver hang; see XID 119)")
	c := find(t, Diagnose(inv, DiagOptions{}), CheckRowRemapPending, 0)
	require.Equal(t, StatusSkipped, c.Status)
	require.Equal(t, "skipped: nvidia-smi hung and was killed after 30s (a GSP or driver hang; see XID 119); the kernel log shows no row-remapping XID (63, 64) this boot", c.Reason)
	require.Empty(t, c.Action)

	inv.Sources.Kmsg = gpu.SourceStatus{Reason: "open /dev/kmsg: permission denied"}
	require.Equal(t, "skipped: nvidia-smi hung and was killed after 30s (a GSP or driver hang; see XID 119); the kernel log could not be read either", find(t, Diagnose(inv, DiagOptions{}), CheckRowRemapFailure, 0).Reason)

	// An ignored XID 63 is no evidence.
	inv.Sources.Kmsg = gpu.SourceStatus{Answered: true}
	g.XIDs = []gpu.XIDCondition{{XID: 63, BusID: g.BusID, Action: gpu.ActionInformation, Ignored: true, Count: 1}}
	require.Equal(t, StatusSkipped, find(t, Diagnose(inv, DiagOptions{}), CheckRowRemapPending, 0).Status)
}
