package sealed

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// A value sealed to a one-time key opens only with that key and only for
// the node, command and ref it was sealed for.
func TestSealOpen_BindsNodeCommandAndRef(t *testing.T) {
	k, err := NewKey()
	require.NoError(t, err)
	ct, err := Seal(KEMID, k.PublicKey(), "node_a", "cmd_1", "bmc-password", []byte("hunter2"))
	require.NoError(t, err)
	require.NotContains(t, string(ct), "hunter2")
	v, err := k.Open("node_a", "cmd_1", "bmc-password", ct)
	require.NoError(t, err)
	require.Equal(t, "hunter2", string(v))
	for _, c := range [][3]string{{"node_b", "cmd_1", "bmc-password"}, {"node_a", "cmd_2", "bmc-password"}, {"node_a", "cmd_1", "other"}} {
		_, err := k.Open(c[0], c[1], c[2], ct)
		require.Error(t, err, c)
	}
	other, err := NewKey()
	require.NoError(t, err)
	_, err = other.Open("node_a", "cmd_1", "bmc-password", ct)
	require.Error(t, err, "another one-time key cannot open it")
	_, err = Seal(0x0010, k.PublicKey(), "node_a", "cmd_1", "x", nil)
	require.ErrorContains(t, err, "only 0x0020")
	_, err = Seal(KEMID, []byte("short"), "node_a", "cmd_1", "x", nil)
	require.Error(t, err)
}

func TestValidRefs(t *testing.T) {
	require.NoError(t, ValidRefs([]string{"bmc-password", "image.token_1"}))
	require.ErrorIs(t, ValidRefs([]string{"Upper"}), ErrBadRef)
	require.ErrorContains(t, ValidRefs([]string{"a", "a"}), "named twice")
	require.ErrorIs(t, ValidRef(""), ErrBadRef)
	many := make([]string, MaxRefs+1)
	for i := range many {
		many[i] = string(rune('a' + i))
	}
	require.ErrorContains(t, ValidRefs(many), "at most 16")
}
