package gpu

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// "bus-id normalisation (kernel 0000:3b:00 vs NVML 00000000:3B:00.0)": every
// spelling of one GPU's bus id gives one key.
func TestNormalizeBusIDMergesEverySourceSpelling(t *testing.T) {
	for _, in := range []string{
		"0000:3b:00",       // kernel log
		"PCI:0000:3b:00",   // kernel log, Xid form
		"00000000:3B:00.0", // NVML and nvidia-smi
		"0000:3b:00.0",     // sysfs
		"3b:00.0",          // no domain
		" 00000000:3b:00.0 ",
	} {
		require.Equal(t, "0000:3b:00", NormalizeBusID(in), in)
	}
	require.Equal(t, "0018:01:00", NormalizeBusID("PCI:0018:01:00"))
	require.Equal(t, "0001:00:09", NormalizeBusID("00000001:00:09.0"))
}

func TestNormalizeBusIDRefusesWhatIsNotABusID(t *testing.T) {
	for _, in := range []string{"", "GPU-0", "0000:3b", "0000:3b:00.0.1", "zz:00.0", "0000:3b:0", "00010000:3b:00.0", "0000:3b:00.x", "0000:3b:00.12"} {
		require.Equal(t, "", NormalizeBusID(in), in)
	}
}

func TestSkipAndUnskip(t *testing.T) {
	var g GPU
	g.Skip(FieldECCErrors, "NVML reports NOT_SUPPORTED for this GPU")
	require.Equal(t, "skipped: NVML reports NOT_SUPPORTED for this GPU", g.SkipReason(FieldECCErrors))
	g.Unskip(FieldECCErrors)
	require.Nil(t, g.Skipped)
	g.Index, g.UUID, g.BusID = 3, "GPU-abc", "0000:3b:00"
	require.Equal(t, "GPU 3 (GPU-abc, 0000:3b:00)", g.Label())
}
