package gateway

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/controlplane/commands/queue"
	"github.com/better-compute/commands/internal/upgrade"
	agentv1 "github.com/better-compute/commands/proto/bc/agent/v1"
	"github.com/better-compute/commands/sdk/kind"
)

// Issue 35: "The command of a daemon.upgrade settles only when the outcome
// is known": neither a Hello of the target version (the new daemon may yet
// fail to rejoin and be rolled back), nor one of the old version (the old
// daemon reports the rollback itself), nor a new boot id settles it.
func TestSettledByReconnect_DaemonUpgrade(t *testing.T) {
	payload, err := json.Marshal(map[string]any{"targetVersion": "1.1.0"})
	require.NoError(t, err)
	c := queue.Command{ID: "cmd_up", NodeID: "node_1", Kind: upgrade.KindName, State: queue.Running, Payload: payload,
		Flags: kind.Flags{SelfTerminating: true}}
	prev := queue.SessionStart{PrevBootID: "boot-1", PrevRole: "node", PrevJournalID: "j1"}

	require.Nil(t, settledByReconnect(c, prev, &agentv1.Hello{BootId: "boot-1", JournalId: "j1", DaemonVersion: "1.1.0"}, "node"),
		"the new daemon's Hello proves it started, not that it rejoined")
	require.Equal(t, "1.1.0", upgradeTarget(c.Payload))
	require.Nil(t, settledByReconnect(c, prev, &agentv1.Hello{BootId: "boot-1", JournalId: "j1", DaemonVersion: "1.0.0"}, "node"),
		"the old version says nothing in Hello; it reports the rollback")
	require.Nil(t, settledByReconnect(c, prev, &agentv1.Hello{BootId: "boot-2", JournalId: "j1", DaemonVersion: "1.0.0"}, "node"),
		"a new boot does not complete an upgrade")

	c.State = queue.Pending
	require.Nil(t, settledByReconnect(c, prev, &agentv1.Hello{BootId: "boot-1", JournalId: "j1", DaemonVersion: "1.1.0"}, "node"),
		"a pending upgrade never reached the node")
}
