package rollout_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/controlplane/commands/wakes"
	"github.com/better-compute/commands/controlplane/modules"
	"github.com/better-compute/commands/controlplane/modules/modulestest"
	"github.com/better-compute/commands/controlplane/modules/rollout"
	"github.com/better-compute/commands/internal/upgrade"
)

// wake delivers c's owner wake to the module, as River would.
func (f *fleet) wake(t *testing.T, c modules.StoredCommand) {
	t.Helper()
	cur, err := f.cmds.Get(f.ctx, f.pool, c.NodeID, c.ID)
	require.NoError(t, err)
	require.NoError(t, f.m.Wake(f.ctx, wakes.Wake{Owner: rollout.KeyPrefix, Args: wakes.Args{Key: c.IdempotencyKey, CommandID: c.ID,
		NodeID: c.NodeID, CommandKind: c.Kind, State: string(cur.State), Reason: cur.Reason}, Attempt: 1}))
}

func (f *fleet) rollout(t *testing.T) rollout.PoolStatus {
	t.Helper()
	st, err := rollout.Status(f.ctx, f.pool, f.tenant, poolName)
	require.NoError(t, err)
	return st
}

func (f *fleet) node(t *testing.T, id string) rollout.NodeStatus {
	t.Helper()
	for _, n := range f.rollout(t).Nodes {
		if n.NodeID == id {
			return n
		}
	}
	t.Fatalf("node %s is not in the rollout", id)
	return rollout.NodeStatus{}
}

// Issue 35: "A report that contradicts a stored terminal state is never
// dropped silently: store it beside … and the rollout acts on it: the
// rollout pauses with a pausedReason naming the node and the reason, and
// the second node is not upgraded." The first node's upgrade was stored
// succeeded (as a gateway that settled it from the new daemon's Hello did),
// then the old bcd reports failed rolled-back: the report is stored beside
// the command, the node becomes rolled-back, the rollout pauses naming it,
// and the second node's command, not yet sent, is cancelled.
func TestRollout_ALateRollbackReportPausesTheWave(t *testing.T) {
	f := newFleet(t, 2, 1, "1.0.0")
	f.set(t, "1.1.0")
	_, err := f.m.Reconcile(f.ctx, f.tenant, poolName)
	require.NoError(t, err)
	fl := f.inFlight(t)
	require.Len(t, fl, 1)
	first := fl[0]
	f.settle(t, first, modules.StateSucceeded, "upgraded", "1.1.0")
	second := f.inFlight(t)
	require.Len(t, second, 1, "the success freed the budget for the second node")

	cur, err := f.cmds.Get(f.ctx, f.pool, first.NodeID, first.ID)
	require.NoError(t, err)
	late := modulestest.Report{CommandID: first.ID, NodeID: first.NodeID, To: modules.StateFailed, Reason: upgrade.ReasonRolledBack, Message: "1.1.0 did not rejoin"}
	_, changed := f.bench.Report(t, late)
	require.False(t, changed, "the forward-only rule keeps the first terminal state")
	require.True(t, f.bench.ReportLate(t, cur, late))
	require.False(t, f.bench.ReportLate(t, cur, late), "a repeat of the report is stored once")
	f.wake(t, first)

	st := f.rollout(t)
	require.True(t, st.Paused)
	require.Contains(t, st.PausedReason, first.NodeID)
	require.Contains(t, st.PausedReason, "rolled-back")
	require.Contains(t, st.PausedReason, "1.1.0 did not rejoin")
	n := f.node(t, first.NodeID)
	require.Equal(t, rollout.StateRolledBack, n.State)
	require.Contains(t, n.Message, "reported after the command was stored succeeded")
	c2, err := f.cmds.Get(f.ctx, f.pool, second[0].NodeID, second[0].ID)
	require.NoError(t, err)
	require.Equal(t, modules.StateCancelled, c2.State, "the second node's command had not reached it: the wave stopped")
	require.Equal(t, rollout.StatePending, f.node(t, second[0].NodeID).State)
	require.Empty(t, f.inFlight(t))

	xs := f.bench.NodesContradictions(t, first.NodeID, second[0].NodeID)
	require.Len(t, xs[first.NodeID], 1)
	require.Equal(t, upgrade.ReasonRolledBack, xs[first.NodeID][0].ReportedReason)
	require.Equal(t, modules.StateSucceeded, xs[first.NodeID][0].StoredState)
	require.Empty(t, xs[second[0].NodeID])
	var topics int
	require.NoError(t, f.pool.QueryRow(f.ctx, `SELECT count(*) FROM outbox WHERE topic = $1`, modulestest.TopicReportContradicted).Scan(&topics))
	require.Equal(t, 1, topics)

	// A repeated wake changes nothing more: the failure counts once.
	f.wake(t, first)
	require.Equal(t, 1, f.rollout(t).Failures)
}

// "The wave stops on the first failure of its kind: a package refused for
// its digest or signature pauses the rollout after the first node
// (maxFailures per wave, default 1)." Then "rollout retry" sends the failed
// node a new command (its second attempt) and resumes the rollout.
func TestRollout_FirstRefusalPausesAndRetrySendsANewCommand(t *testing.T) {
	f := newFleet(t, 3, 1, "1.0.0")
	f.set(t, "1.1.0")
	_, err := f.m.Reconcile(f.ctx, f.tenant, poolName)
	require.NoError(t, err)
	fl := f.inFlight(t)
	require.Len(t, fl, 1)
	bad := fl[0]
	f.settle(t, bad, modules.StateFailed, "download-failed", "")
	st := f.rollout(t)
	require.True(t, st.Paused, "the first refusal pauses the rollout")
	require.Contains(t, st.PausedReason, bad.NodeID)
	require.Contains(t, st.PausedReason, "download-failed")
	require.Contains(t, st.PausedReason, "maxFailures 1")
	require.Equal(t, 1, st.Failures)
	require.Empty(t, f.inFlight(t), "no other node fetches the bad package")
	for _, n := range st.Nodes {
		if n.NodeID != bad.NodeID {
			require.Equal(t, rollout.StatePending, n.State)
		}
	}

	var retried int
	require.NoError(t, pgx.BeginFunc(f.ctx, f.pool, func(tx pgx.Tx) error {
		_, _, err := rollout.Retry(f.ctx, tx, f.tenant, poolName, f.nodes[0]+"x", "ops")
		require.Error(t, err, "a node that did not fail is refused")
		require.Contains(t, err.Error(), "nothing to retry")
		return nil
	}))
	require.NoError(t, pgx.BeginFunc(f.ctx, f.pool, func(tx pgx.Tx) error {
		r, n, err := rollout.Retry(f.ctx, tx, f.tenant, poolName, "", "ops")
		require.False(t, r.Paused)
		require.Zero(t, r.Failures)
		retried = n
		return err
	}))
	require.Equal(t, 1, retried)
	_, err = f.m.Reconcile(f.ctx, f.tenant, poolName)
	require.NoError(t, err)
	fl = f.inFlight(t)
	require.Len(t, fl, 1)
	require.Equal(t, bad.NodeID, fl[0].NodeID, "the retried node goes first")
	require.NotEqual(t, bad.ID, fl[0].ID)
	require.True(t, strings.HasSuffix(fl[0].IdempotencyKey, ":2"), fl[0].IdempotencyKey)
	require.Equal(t, 2, f.node(t, bad.NodeID).Attempts)
	for len(fl) > 0 {
		f.settle(t, fl[0], modules.StateSucceeded, "", "1.1.0")
		fl = f.inFlight(t)
	}
	for _, n := range f.rollout(t).Nodes {
		require.Equal(t, rollout.StateUpgraded, n.State)
	}
}

// maxFailures 2 lets the first failure pass; a rollback pauses whatever
// the count. "set with the same version and a new package digest retries
// failed nodes": the rolled-back node is sent the new package with
// retrySkipped, which its skipped target needs.
func TestRollout_MaxFailuresAndSetWithANewPackageRetries(t *testing.T) {
	f := newFleet(t, 3, 1, "1.0.0")
	set := func(sha string) {
		t.Helper()
		require.NoError(t, pgx.BeginFunc(f.ctx, f.pool, func(tx pgx.Tx) error {
			_, err := rollout.Set(f.ctx, tx, rollout.Desired{TenantID: f.tenant, Pool: poolName, Version: "1.1.0",
				PackageURL: "https://releases.example/bcd-1.1.0.tar.gz", PackageSize: 1234, PackageSHA256: sha, MaxFailures: 2,
				Release: []byte(`{"body":"e30=","signatures":[{"keyId":"k","sig":"AAAA"}]}`)}, "test")
			return err
		}))
	}
	set(strings.Repeat("ab", 32))
	_, err := f.m.Reconcile(f.ctx, f.tenant, poolName)
	require.NoError(t, err)
	fl := f.inFlight(t)
	f.settle(t, fl[0], modules.StateFailed, "self-check-failed", "")
	require.False(t, f.rollout(t).Paused, "1 failure of maxFailures 2")
	fl = f.inFlight(t)
	require.Len(t, fl, 1)
	rolled := fl[0]
	f.settle(t, rolled, modules.StateFailed, upgrade.ReasonRolledBack, "")
	st := f.rollout(t)
	require.True(t, st.Paused, "a rollback always pauses")
	require.Equal(t, 2, st.Failures)

	set(strings.Repeat("cd", 32))
	st = f.rollout(t)
	require.False(t, st.Paused, "a new package for the same version retries and resumes")
	require.Equal(t, int64(1), st.Generation, "the same version keeps its generation")
	_, err = f.m.Reconcile(f.ctx, f.tenant, poolName)
	require.NoError(t, err)
	fl = f.inFlight(t)
	require.Len(t, fl, 1)
	type payload struct {
		RetrySkipped bool `json:"retrySkipped"`
		Package      struct {
			SHA256 string `json:"sha256"`
		} `json:"package"`
	}
	for len(fl) > 0 {
		var p payload
		require.NoError(t, json.Unmarshal(fl[0].Payload, &p))
		require.Equal(t, strings.Repeat("cd", 32), p.Package.SHA256)
		require.Equal(t, fl[0].NodeID == rolled.NodeID, p.RetrySkipped, "only the node that rolled back is sent retrySkipped")
		f.settle(t, fl[0], modules.StateSucceeded, "", "1.1.0")
		fl = f.inFlight(t)
	}
	for _, n := range f.rollout(t).Nodes {
		require.Equal(t, rollout.StateUpgraded, n.State, n.NodeID)
	}
}

// "or the rejoin window passes with no news (failed, with the reason)": an
// upgrade whose new daemon said Hello longer ago than the rejoin window and
// the grace fails rejoin-timeout and pauses the rollout; one whose Hello
// is recent is left alone. A rollback the node reports later anyway is
// stored beside it and makes the node rolled-back.
func TestRollout_ExpireRejoinsFailsASilentUpgrade(t *testing.T) {
	f := newFleet(t, 2, 1, "1.0.0")
	f.set(t, "1.1.0")
	_, err := f.m.Reconcile(f.ctx, f.tenant, poolName)
	require.NoError(t, err)
	fl := f.inFlight(t)
	require.Len(t, fl, 1)
	c := fl[0]
	f.bench.Report(t, modulestest.Report{CommandID: c.ID, NodeID: c.NodeID, To: modules.StateRunning})
	_, err = f.pool.Exec(f.ctx, `UPDATE nodes SET daemon_version = '1.1.0', session_opened_at = now() - interval '6 minutes' WHERE id = $1`, c.NodeID)
	require.NoError(t, err)
	n, err := f.m.ExpireRejoins(f.ctx)
	require.NoError(t, err)
	require.Zero(t, n, "5 minutes of window and 2 of grace have not passed")

	_, err = f.pool.Exec(f.ctx, `UPDATE nodes SET session_opened_at = now() - interval '8 minutes' WHERE id = $1`, c.NodeID)
	require.NoError(t, err)
	n, err = f.m.ExpireRejoins(f.ctx)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	got, err := f.cmds.Get(f.ctx, f.pool, c.NodeID, c.ID)
	require.NoError(t, err)
	require.Equal(t, modules.StateFailed, got.State)
	require.Equal(t, rollout.ReasonRejoinTimeout, got.Reason)
	require.Contains(t, got.Message, "wrote no rejoin marker")
	f.wake(t, c)
	st := f.rollout(t)
	require.True(t, st.Paused)
	require.Contains(t, st.PausedReason, rollout.ReasonRejoinTimeout)
	require.Empty(t, f.inFlight(t))

	late := modulestest.Report{CommandID: c.ID, NodeID: c.NodeID, To: modules.StateFailed, Reason: upgrade.ReasonRolledBack, Message: "1.1.0 did not rejoin"}
	f.bench.ReportLate(t, got, late)
	f.wake(t, c)
	require.Equal(t, rollout.StateRolledBack, f.node(t, c.NodeID).State)
	require.Equal(t, 1, f.rollout(t).Failures, "the same node's failure counts once")
}
