package gateway

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/controlplane/queue"
	"github.com/better-compute/commands/internal/upgrade"
	agentv1 "github.com/better-compute/commands/proto/bc/agent/v1"
	"github.com/better-compute/commands/sdk/kind"
)

// "The new daemon settles the command in its first Hello (its version and
// boot id) as succeeded": an in-flight daemon.upgrade is settled by a Hello
// that reports the target version, and neither by a Hello of the old
// version (a rollback, which the old daemon reports itself) nor by a new
// boot id, which proves nothing about an upgrade.
func TestSettledByReconnect_DaemonUpgrade(t *testing.T) {
	payload, err := json.Marshal(map[string]any{"targetVersion": "1.1.0"})
	require.NoError(t, err)
	c := queue.Command{ID: "cmd_up", NodeID: "node_1", Kind: upgrade.KindName, State: queue.Running, Payload: payload,
		Flags: kind.Flags{SelfTerminating: true}}
	prev := queue.SessionStart{PrevBootID: "boot-1", PrevRole: "node", PrevJournalID: "j1"}

	tr := settledByReconnect(c, prev, &agentv1.Hello{BootId: "boot-1", JournalId: "j1", DaemonVersion: "1.1.0"}, "node")
	require.NotNil(t, tr)
	require.Equal(t, queue.Succeeded, tr.To)
	require.Equal(t, ReasonUpgraded, tr.Reason)
	require.False(t, tr.Rebooted)

	require.Nil(t, settledByReconnect(c, prev, &agentv1.Hello{BootId: "boot-1", JournalId: "j1", DaemonVersion: "1.0.0"}, "node"),
		"the old version says nothing in Hello; it reports the rollback")
	require.Nil(t, settledByReconnect(c, prev, &agentv1.Hello{BootId: "boot-2", JournalId: "j1", DaemonVersion: "1.0.0"}, "node"),
		"a new boot does not complete an upgrade")

	c.State = queue.Pending
	require.Nil(t, settledByReconnect(c, prev, &agentv1.Hello{BootId: "boot-1", JournalId: "j1", DaemonVersion: "1.1.0"}, "node"),
		"a pending upgrade never reached the node")
}
