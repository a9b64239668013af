package e2e

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/controlplane/modules/rollout"
	"github.com/better-compute/commands/controlplane/server/servertest"
	"github.com/better-compute/commands/internal/testhook"
	"github.com/better-compute/commands/internal/testutil"
	"github.com/better-compute/commands/internal/upgrade"
)

const (
	rolloutPool = "gpu-a"
	nodeA2      = "node_a2"
)

func (c *cluster) waitRollout(what string, cond func(rollout.PoolStatus) bool) rollout.PoolStatus {
	c.t.Helper()
	var st rollout.PoolStatus
	testutil.WaitFor(c.t, 3*time.Minute, what, func() bool {
		got, err := rollout.Status(context.Background(), c.srv.Pool, servertest.TenantA, rolloutPool)
		if err != nil {
			return false
		}
		st = got
		return cond(got)
	})
	return st
}

// repeatedUpgrades names each node and release (the signed release `rollout
// set` named: version, package digest and when it was signed, so one per
// set of a package) that got more than one daemon.upgrade command, with how
// many. The tampered package and the fixed one have the same digest (the
// same bytes were signed; other bytes were served), hence the release.
func (c *cluster) repeatedUpgrades() []string {
	c.t.Helper()
	rows, err := c.srv.Pool.Query(context.Background(), `SELECT node_id || ' ' || (payload->>'targetVersion') || ' ' || (payload->'package'->>'sha256') || ': ' || count(*)
		FROM commands WHERE kind = $1 GROUP BY node_id, payload->>'targetVersion', payload->'package'->>'sha256', payload->>'release' HAVING count(*) > 1`, upgrade.KindName)
	require.NoError(c.t, err)
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(c.t, err)
	return out
}

func nodeState(st rollout.PoolStatus, id string) rollout.NodeStatus {
	for _, n := range st.Nodes {
		if n.NodeID == id {
			return n
		}
	}
	return rollout.NodeStatus{}
}

// Issue 35, end to end through bc-server with real bcd nodes under a fake
// systemd, each on a versioned install directory, in a pool with the
// default budget (one node at a time):
//
//  1. "a tampered package (paused after the first refusal)": the package's
//     bytes are not the signed ones; node_a1 refuses it, the rollout
//     pauses naming it, and node_a2 is never sent it.
//  2. "a never-rejoin release (rolled back, reported, wave paused after the
//     first node, the second untouched)": set again with the same version
//     and that release's package (a retry); node_a1's new bcd says Hello,
//     which settles nothing, never rejoins, the helper rolls back, the old
//     bcd reports failed rolled-back, and the rollout pauses naming node_a1
//     and the reason; node_a2 still runs the old version, never sent a
//     command.
//  3. "a retry after a fix", "a staged rollout of a good release" and
//     "kill -9 of bc-server in the middle of a wave (the wave resumes, no
//     node upgraded twice)": set with the fixed package; node_a1 is
//     retried (retrySkipped) and upgraded, then node_a2, each with one
//     command, although bc-server is killed with SIGKILL while node_a1's
//     upgrade is in flight and node_a2's not yet started, and started
//     again on the same configuration and database.
//
// From the pool's setup on, the control plane is the bc-server binary on
// the cluster's configuration written as YAML (swapToBinary): the rollout
// module's 1 s pass and the release key travel in that file.
func TestE2E_RolloutStopsOnABadReleaseAndRetriesAfterAFix(t *testing.T) {
	site, adjust := withReleaseKey(t)
	c := newCluster(t, adjust)
	r := buildReleases(t, map[string]string{"old": "1.0.0", "bad": "1.1.0," + testhook.NeverRejoin, "good": "1.1.0"})
	a1 := c.upgradeNode(servertest.NodeA1, r, "old", false)
	a2 := c.upgradeNode(nodeA2, r, "old", true)
	for _, id := range []string{servertest.NodeA1, nodeA2} {
		_, stderr, code := c.cli("pools", "set-node", "nodeId="+id, "pool="+rolloutPool)
		require.Equal(t, 0, code, stderr)
	}
	srv := c.swapToBinary()

	// 1. The tampered package.
	c.setRollout(rolloutPool, site.publish(r, "good", "tampered.tar.gz", true))
	st := c.waitRollout("the rollout to pause on the tampered package", func(st rollout.PoolStatus) bool { return st.Paused })
	t.Logf("paused: %s", st.PausedReason)
	require.Contains(t, st.PausedReason, servertest.NodeA1)
	require.Contains(t, st.PausedReason, "download-failed")
	require.Equal(t, rollout.StateFailed, nodeState(st, servertest.NodeA1).State)
	ups := c.upgrades(servertest.NodeA1)
	require.Len(t, ups, 1)
	require.Equal(t, [3]string{ups[0][0], "failed", "download-failed"}, ups[0])
	require.Empty(t, c.upgrades(nodeA2), "the second node never fetched the bad package")
	require.Equal(t, "1.0.0", c.daemonVersion(servertest.NodeA1))

	// 2. The release that never rejoins.
	bad := site.publish(r, "bad", "bad.tar.gz", false)
	out := c.setRollout(rolloutPool, bad)
	require.Contains(t, out, "running; failures 0/1", "a new package for the same version retries and resumes")
	c.waitVersion(servertest.NodeA1, "1.1.0")
	ups = c.upgrades(servertest.NodeA1)
	require.Len(t, ups, 2)
	require.NotEqual(t, "succeeded", ups[1][1], "the new daemon's Hello settles nothing")
	st = c.waitRollout("the rollout to pause on the rollback", func(st rollout.PoolStatus) bool { return st.Paused })
	t.Logf("paused: %s", st.PausedReason)
	require.Contains(t, st.PausedReason, servertest.NodeA1)
	require.Contains(t, st.PausedReason, upgrade.ReasonRolledBack)
	require.Contains(t, st.PausedReason, "did not rejoin")
	ups = c.upgrades(servertest.NodeA1)
	require.Equal(t, "failed", ups[1][1])
	require.Equal(t, upgrade.ReasonRolledBack, ups[1][2])
	require.Equal(t, rollout.StateRolledBack, nodeState(st, servertest.NodeA1).State)
	c.waitVersion(servertest.NodeA1, "1.0.0")
	require.Equal(t, rollout.StatePending, nodeState(st, nodeA2).State)
	require.Empty(t, c.upgrades(nodeA2), "the second node is untouched")
	require.Equal(t, "1.0.0", c.daemonVersion(nodeA2))
	cur, err := a2.layout.CurrentVersion()
	require.NoError(t, err)
	require.Equal(t, "1.0.0", cur)
	require.Equal(t, 1, c.settledCount(ups[1][0]), "one terminal state")

	// 3. The fix. bc-server is killed with SIGKILL while node_a1's upgrade
	// is in flight (sent to the node, not settled) and started again: the
	// wave resumes from what is stored, and no node is upgraded twice. The
	// rejoin window (60 s) is sized for the restart, as an operator sizes
	// it: a new bcd that cannot reach any control plane within it is
	// rolled back, by design.
	good := site.publish(r, "good", "good.tar.gz", false)
	c.setRollout(rolloutPool, good, "rejoinWindowSeconds=60")
	var inFlight string
	testutil.WaitFor(t, 2*time.Minute, "node_a1's third upgrade to be in flight", func() bool {
		ups := c.upgrades(servertest.NodeA1)
		if len(ups) != 3 {
			return false
		}
		inFlight = ups[2][0]
		return slices.Contains([]string{"dispatched", "acked", "running"}, ups[2][1])
	})
	srv.kill()
	ups = c.upgrades(servertest.NodeA1)
	t.Logf("killed bc-server with node_a1's upgrade %s %s", ups[2][0], ups[2][1])
	require.Empty(t, c.upgrades(nodeA2), "the kill came in the middle of the wave: node_a2 not started yet")
	srv.start(c)
	st = c.waitRollout("both nodes to be upgraded", func(st rollout.PoolStatus) bool {
		return nodeState(st, servertest.NodeA1).State == rollout.StateUpgraded && nodeState(st, nodeA2).State == rollout.StateUpgraded
	})
	require.False(t, st.Paused)
	c.waitVersion(servertest.NodeA1, "1.1.0")
	c.waitVersion(nodeA2, "1.1.0")
	ups = c.upgrades(servertest.NodeA1)
	require.Len(t, ups, 3)
	require.Equal(t, inFlight, ups[2][0], "the upgrade in flight at the kill is the one that settled; none was started again")
	require.Equal(t, "succeeded", ups[2][1])
	ups2 := c.upgrades(nodeA2)
	require.Len(t, ups2, 1, "no node is upgraded twice")
	require.Equal(t, "succeeded", ups2[0][1])
	for _, u := range append(append([][3]string(nil), ups...), ups2...) {
		require.Equal(t, 1, c.settledCount(u[0]), "command %s settled once", u[0])
	}
	require.Empty(t, c.repeatedUpgrades(), "one daemon.upgrade per node per release set")
	// The nodes themselves: the last upgrade each ran is its one command
	// of the good package, which rejoined. (The command settles on the
	// rejoin marker; the helper records the outcome on its next poll.)
	for n, id := range map[*upNode]string{a1: inFlight, a2: ups2[0][0]} {
		var us upgrade.State
		testutil.WaitFor(t, 30*time.Second, n.id+"'s helper to record the upgrade's outcome", func() bool {
			got, err := n.layout.ReadState()
			us = got
			return err == nil && got.Done()
		})
		require.Equal(t, id, us.CommandID, "%s's last upgrade", n.id)
		require.Equal(t, upgrade.OutcomeSucceeded, us.Outcome, "%s's last upgrade", n.id)
		require.False(t, us.RejoinedAt.IsZero(), "%s's new daemon rejoined", n.id)
	}
	// Staged: node_a2's command was created only once node_a1's settled.
	var staged bool
	require.NoError(t, c.srv.Pool.QueryRow(context.Background(), `SELECT (SELECT created_at FROM commands WHERE id = $2) >= (SELECT settled_at FROM commands WHERE id = $1)`,
		ups[2][0], ups2[0][0]).Scan(&staged))
	require.True(t, staged, "the budget of one holds: the second node waits for the first's outcome")
	require.True(t, slices.ContainsFunc(st.Nodes, func(n rollout.NodeStatus) bool { return n.NodeID == servertest.NodeA1 && n.Attempts == 3 }))
}
