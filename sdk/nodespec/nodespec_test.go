package nodespec

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestSpec_BusyReason(t *testing.T) {
	s := Spec{
		Holds: []Hold{
			{GPU: "GPU-a", State: HoldLive, Allocation: "alloc_1"},
			{GPU: "GPU-b", MIG: "MIG-b1", State: HoldLive},
			{GPU: "GPU-c", Slot: "slot-0", State: HoldLive},
			{GPU: "GPU-d", State: HoldReleased},
		},
		Instances: []Instance{{Name: "inst_vm1", PassthroughGPUs: []string{"GPU-e"}}},
	}
	for _, tc := range []struct{ uuid, want string }{
		{"GPU-a", "GPU-a has a live assignment"},
		{"GPU-b", "GPU-b has a live assignment"}, // a hold on one of its MIG instances
		{"GPU-c", "GPU-c has a live assignment"}, // a hold on one of its slots
		{"GPU-d", ""},                            // a released hold does not make it busy
		{"GPU-e", "GPU-e is passed through to inst_vm1"},
		{"GPU-f", ""},
	} {
		require.Equal(t, tc.want, s.BusyReason(tc.uuid), tc.uuid)
	}
}

func TestParse_RejectsHoldWithoutGPU(t *testing.T) {
	_, err := Parse([]byte(`{"holds":[{"state":"live"}]}`))
	require.ErrorContains(t, err, "holds[0]: gpu is required")
	s, err := Parse(nil)
	require.NoError(t, err)
	require.Empty(t, s.Holds)
}
