package e2e

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/better-compute/commands/bcd/journal"
	"github.com/better-compute/commands/controlplane/server/servertest"
	apiv1 "github.com/better-compute/commands/proto/bc/api/v1"
)

// "a command goes from pending to succeeded and its result shows through
// commands.get and the CLI".
func TestE2E_CommandSucceedsAndShowsThroughGetAndCLI(t *testing.T) {
	c := newCluster(t)
	n := c.join()
	n.start()

	h := newHold(t)
	h.releaseNow(t)
	payload, err := json.Marshal(h.payload())
	require.NoError(t, err)
	out, errs, code := c.cli("commands", "run", "nodeId="+"node_a1", "kind="+kindHold, "payload="+string(payload), "--wait", "--poll", "200ms", "--json")
	require.Equal(t, 0, code, "better-compute commands run --wait: %s", errs)
	var got map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &got), out)
	require.Equal(t, "succeeded", got["state"])
	require.Equal(t, map[string]any{"runs": float64(1), "released": true}, got["result"])
	id := got["id"].(string)

	cmd := c.get(id)
	require.Equal(t, "succeeded", cmd.GetState())
	require.Equal(t, float64(1), cmd.GetResult().GetStructValue().AsMap()["runs"])
	out, errs, code = c.cli("commands", "get", "nodeId=node_a1", "commandId="+id)
	require.Equal(t, 0, code, errs)
	require.Contains(t, out, `"released":true`)
	require.Equal(t, 1, h.runs(t))
	require.Equal(t, 1, c.settledCount(id), "exactly one terminal state")
}

// "kill -9 of bcd mid-command, then a restart": the retry-safe command
// runs again and succeeds; the one that is not retry-safe fails
// interrupted and never runs twice.
func TestE2E_KillMidCommandThenRestart(t *testing.T) {
	c := newCluster(t)
	n := c.join()
	n.start()

	safe, once := newHold(t), newHold(t)
	safeCmd := c.run(kindHold, safe.payload())
	onceCmd := c.run(kindHoldOnce, once.payload())
	safe.waitStarted(t)
	once.waitStarted(t)
	c.waitState(safeCmd.GetId(), "running")
	c.waitState(onceCmd.GetId(), "running")

	n.kill()
	safe.releaseNow(t)
	once.releaseNow(t)
	n.start()

	gotSafe := c.waitState(safeCmd.GetId(), "succeeded")
	require.Equal(t, float64(2), gotSafe.GetResult().GetStructValue().AsMap()["runs"], "the retry-safe command ran again")
	gotOnce := c.waitState(onceCmd.GetId(), "failed")
	require.Equal(t, journal.ReasonInterrupted, gotOnce.GetReason())
	require.Equal(t, 1, once.runs(t), "a command that is not retry-safe never runs twice")
	require.Equal(t, 2, safe.runs(t))
	require.Equal(t, 1, c.settledCount(safeCmd.GetId()))
	require.Equal(t, 1, c.settledCount(onceCmd.GetId()))
}

// "a restart of the control plane mid-flight": the running command's
// outcome lands once the node reconnects to the new server, and it ran once.
func TestE2E_ControlPlaneRestartMidFlight(t *testing.T) {
	c := newCluster(t)
	n := c.join()
	n.start()

	h := newHold(t)
	cmd := c.run(kindHoldOnce, h.payload())
	h.waitStarted(t)
	c.waitState(cmd.GetId(), "running")

	before := n.sessions()
	c.restartControlPlane()
	n.waitSession(before)
	h.releaseNow(t)

	got := c.waitState(cmd.GetId(), "succeeded")
	require.Equal(t, float64(1), got.GetResult().GetStructValue().AsMap()["runs"])
	require.Equal(t, 1, h.runs(t))
	require.Equal(t, 1, c.settledCount(cmd.GetId()))

	// The new server dispatches new work to the same node.
	h2 := newHold(t)
	h2.releaseNow(t)
	cmd2 := c.run(kindHold, h2.payload())
	c.waitState(cmd2.GetId(), "succeeded")
}

// "the journal deleted between runs": a new journal id fails the in-flight
// command that is not retry-safe with journal-lost; the retry-safe one is
// replayed, runs again and succeeds.
func TestE2E_JournalDeletedBetweenRuns(t *testing.T) {
	c := newCluster(t)
	n := c.join()
	n.start()

	safe, once := newHold(t), newHold(t)
	safeCmd := c.run(kindHold, safe.payload())
	onceCmd := c.run(kindHoldOnce, once.payload())
	safe.waitStarted(t)
	once.waitStarted(t)
	c.waitState(safeCmd.GetId(), "running")
	c.waitState(onceCmd.GetId(), "running")

	n.kill()
	require.NoError(t, os.Remove(filepath.Join(n.state, journal.FileName)))
	safe.releaseNow(t)
	once.releaseNow(t)
	n.start()

	gotOnce := c.waitState(onceCmd.GetId(), "failed")
	require.Equal(t, "journal-lost", gotOnce.GetReason())
	gotSafe := c.waitState(safeCmd.GetId(), "succeeded")
	require.Equal(t, float64(2), gotSafe.GetResult().GetStructValue().AsMap()["runs"])
	require.Equal(t, 1, once.runs(t), "a command that is not retry-safe never runs twice")
	require.Equal(t, 1, c.settledCount(onceCmd.GetId()))
	require.Equal(t, 1, c.settledCount(safeCmd.GetId()))
}

// "a reboot simulated by a new boot id": the self-terminating kind
// reports success and waits; bcd restarts on a new boot id and the command
// completes succeeded with rebooted: true.
func TestE2E_RebootByNewBootID(t *testing.T) {
	c := newCluster(t)
	n := c.join()
	n.start()

	cmd := c.run(kindReboot, map[string]any{})
	c.waitState(cmd.GetId(), "running")
	n.stop()
	require.NoError(t, os.WriteFile(n.boot, []byte("boot-2\n"), 0o600))
	n.start()

	got := c.waitState(cmd.GetId(), "succeeded")
	var rebooted bool
	require.NoError(t, c.srv.Pool.QueryRow(context.Background(), `SELECT rebooted FROM commands WHERE id = $1`, cmd.GetId()).Scan(&rebooted))
	require.True(t, rebooted, "rebooted: true (reason %q)", got.GetReason())
	require.Equal(t, 1, c.settledCount(cmd.GetId()))
}

// "cancel in flight": the running command stops and ends cancelled.
func TestE2E_CancelInFlight(t *testing.T) {
	c := newCluster(t)
	n := c.join()
	n.start()

	h := newHold(t)
	cmd := c.run(kindHoldOnce, h.payload())
	h.waitStarted(t)
	c.waitState(cmd.GetId(), "running")
	out, errs, code := c.cli("commands", "cancel", "nodeId=node_a1", "commandId="+cmd.GetId())
	require.Equal(t, 0, code, "cancel: %s %s", out, errs)

	got := c.waitState(cmd.GetId(), "cancelled")
	require.Equal(t, false, got.GetResult().GetStructValue().AsMap()["released"])
	require.Equal(t, 1, h.runs(t))
	require.Equal(t, 1, c.settledCount(cmd.GetId()))
}

// Expiry by the sweeper: a command whose node is away past not_after
// expires, and the node that comes back never runs it.
func TestE2E_ExpiredWhileTheNodeIsAwayNeverRuns(t *testing.T) {
	c := newCluster(t)
	n := c.join()
	n.start()
	n.kill()

	h := newHold(t)
	h.releaseNow(t)
	p, err := structpb.NewStruct(h.payload())
	require.NoError(t, err)
	ten := int32(10)
	cmd, err := c.api.Run(c.ctx(), &apiv1.RunCommandRequest{TenantId: servertest.TenantA, NodeId: servertest.NodeA1, Kind: kindHold, Payload: p, NotAfterSeconds: &ten})
	require.NoError(t, err)
	got := c.waitState(cmd.GetId(), "expired")
	require.Equal(t, "not_after", got.GetReason())

	n.start()
	h2 := newHold(t)
	h2.releaseNow(t)
	after := c.run(kindHold, h2.payload())
	c.waitState(after.GetId(), "succeeded")
	require.Equal(t, 0, h.runs(t), "an expired command never runs")
	require.Equal(t, "expired", c.get(cmd.GetId()).GetState())
	require.Equal(t, 1, c.settledCount(cmd.GetId()))
}
