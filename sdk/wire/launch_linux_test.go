//go:build linux

package wire

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestBaseEnv_PassesOnlyTheAllowlist(t *testing.T) {
	t.Setenv("BCD_SECRET", "x")
	t.Setenv("TZ", "UTC")
	env := BaseEnv()
	require.Contains(t, env, "TZ=UTC")
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		require.Contains(t, baseEnv, k)
	}
	t.Setenv("PATH", "")
	require.Contains(t, BaseEnv(), "PATH=")
}

func TestCommand_LeadsItsOwnProcessGroup(t *testing.T) {
	cmd := Command("/bin/true", []string{"A=1"})
	require.True(t, cmd.SysProcAttr.Setpgid)
	require.Equal(t, []string{"A=1"}, cmd.Env)
}

func TestKillGroup_RefusesInitAndOurselves(t *testing.T) {
	require.Error(t, KillGroup(0))
	require.Error(t, KillGroup(1))
}
