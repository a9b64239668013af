package server

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/controlplane/server/serverconfig"
)

// Issue 35: the modules' passes and waits are configuration; a negative
// one, or a pass under a second, is refused naming its key, and 0 (unset)
// keeps the default.
func TestCheckModuleTimesNamesTheKey(t *testing.T) {
	require.NoError(t, checkModuleTimes(serverconfig.ModulesConfig{}))
	require.NoError(t, checkModuleTimes(serverconfig.ModulesConfig{Cooldown: serverconfig.Duration(time.Minute),
		Rollout: serverconfig.RolloutConfig{Interval: serverconfig.Duration(time.Second), RejoinGrace: serverconfig.Duration(time.Second)}}))
	err := checkModuleTimes(serverconfig.ModulesConfig{Cooldown: serverconfig.Duration(-time.Second)})
	require.ErrorContains(t, err, "modules.cooldown -1s: must not be negative")
	err = checkModuleTimes(serverconfig.ModulesConfig{Rollout: serverconfig.RolloutConfig{Interval: serverconfig.Duration(10 * time.Millisecond)}})
	require.ErrorContains(t, err, "modules.rollout.interval 10ms: a pass must be at least 100ms")
	err = checkModuleTimes(serverconfig.ModulesConfig{Rollout: serverconfig.RolloutConfig{RejoinGrace: serverconfig.Duration(-time.Minute)}})
	require.ErrorContains(t, err, "modules.rollout.rejoinGrace")
}
