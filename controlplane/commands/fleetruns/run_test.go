package fleetruns_test

import (
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/controlplane/commands/fleetruns"
	"github.com/better-compute/commands/controlplane/commands/queue"
	"github.com/better-compute/commands/controlplane/internal/errcode"
)

// "a run over a label selector with maxConcurrency 2 and maxErrors 1 where
// two nodes fail; the open count never exceeded 2; the run stopped with the
// rest not-started": driven pass by pass, settling each command as a node
// would report it.
func TestRunKeepsConcurrencyAndStopsPastTheErrorLimit(t *testing.T) {
	f := setup(t, 8)
	for _, n := range f.nodes[:6] {
		f.label(t, n, map[string]string{"gpu": "h200", "rack": "r1"})
	}
	f.label(t, f.nodes[6], map[string]string{"gpu": "a100"})
	run := f.create(t, fleetruns.CreateParams{Targets: fleetruns.Targets{Selector: "gpu=h200,rack in (r1,r2)"}, MaxConcurrency: "2", MaxErrors: "1"})
	require.Equal(t, 6, run.Counts.Targets, "the selector picks the six h200 nodes, not the a100 or the unlabelled one")
	require.Equal(t, 2, run.ConcurrencyLimit)
	require.Equal(t, 1, run.ErrorLimit)
	require.Equal(t, fleetruns.StateRunning, run.State)

	failing := map[string]bool{f.nodes[1]: true, f.nodes[3]: true}
	maxOpen, started := 0, map[string]int{}
	for range 20 {
		require.NoError(t, f.s.AdvanceOnce(f.ctx))
		open := f.open(t, run.ID)
		maxOpen = max(maxOpen, len(open))
		if len(open) == 0 {
			break
		}
		for _, c := range open {
			started[c.NodeID]++
			require.Equal(t, "ops", c.Requester, "the run's commands record who asked")
			require.Equal(t, queue.ViaFleetRun, c.RequestedVia)
			if failing[c.NodeID] {
				f.settle(t, c, queue.Failed, "check-failed")
			} else {
				f.settle(t, c, queue.Succeeded, "")
			}
		}
	}
	require.NoError(t, f.s.AdvanceOnce(f.ctx))
	require.LessOrEqual(t, maxOpen, 2, "the open count never exceeds maxConcurrency")
	for n, k := range started {
		require.Equal(t, 1, k, "node %s started once", n)
	}
	run = f.get(t, run.ID)
	require.Equal(t, fleetruns.StateFailed, run.State)
	require.Equal(t, fleetruns.ReasonMaxErrors, run.StateReason)
	require.Contains(t, run.StateMessage, "2 failure(s) exceed the error limit 1")
	require.NotNil(t, run.FinishedAt)
	require.Equal(t, 2, run.Counts.ByState[fleetruns.TargetSucceeded])
	require.Equal(t, 2, run.Counts.ByState[fleetruns.TargetFailed])
	require.Equal(t, 2, run.Counts.ByState[fleetruns.TargetNotStarted], "the rest are listed not-started")
	require.Equal(t, 2, run.Counts.ByReason["check-failed"])
	fails, _, err := f.s.Targets(f.ctx, f.tenant, run.ID, "failures", 0, "")
	require.NoError(t, err)
	require.Len(t, fails, 2)
	for _, tg := range fails {
		require.True(t, failing[tg.NodeID], "the failures name the failing nodes: %s", tg.NodeID)
		require.Equal(t, "check-failed", tg.Reason)
		require.Equal(t, "test: check-failed", tg.Message)
	}
}

// A run whose every node succeeds ends succeeded, and one with a failure
// within the limit ends failed (node-failures) after running every node.
func TestRunEndsByItsOutcomes(t *testing.T) {
	f := setup(t, 4)
	run := f.create(t, fleetruns.CreateParams{Targets: fleetruns.Targets{All: true}, MaxConcurrency: "100%", MaxErrors: "50%"})
	require.Equal(t, 4, run.ConcurrencyLimit)
	require.Equal(t, 2, run.ErrorLimit)
	require.NoError(t, f.s.AdvanceOnce(f.ctx))
	open := f.open(t, run.ID)
	require.Len(t, open, 4, "100% starts every node at once")
	for i, c := range open {
		if i == 0 {
			f.settle(t, c, queue.Rejected, "UNSUPPORTED")
			continue
		}
		f.settle(t, c, queue.Succeeded, "")
	}
	require.NoError(t, f.s.AdvanceOnce(f.ctx))
	run = f.get(t, run.ID)
	require.Equal(t, fleetruns.StateFailed, run.State)
	require.Equal(t, fleetruns.ReasonNodeFailures, run.StateReason)
	require.Equal(t, 1, run.Counts.Failures(), "a rejection is a failure")
	require.Equal(t, 3, run.Counts.ByState[fleetruns.TargetSucceeded])

	ok := f.create(t, fleetruns.CreateParams{Targets: fleetruns.Targets{NodeIDs: f.nodes[:2]}, MaxConcurrency: "1", IdempotencyKey: "k2"})
	for range 4 {
		require.NoError(t, f.s.AdvanceOnce(f.ctx))
		for _, c := range f.open(t, ok.ID) {
			f.settle(t, c, queue.Succeeded, "")
		}
	}
	require.Equal(t, fleetruns.StateSucceeded, f.get(t, ok.ID).State)
}

// "kill -9 … leave no node over the concurrency limit, no node started
// twice": two advancers (two replicas, or a leader and one that wakes up
// late) passing over the same run at once never exceed the limit nor queue
// a node's command twice; the run row's lock and the run:<id>:<node> key
// hold it.
func TestConcurrentPassesNeverExceedTheLimitOrStartANodeTwice(t *testing.T) {
	f := setup(t, 30)
	run := f.create(t, fleetruns.CreateParams{Targets: fleetruns.Targets{All: true}, MaxConcurrency: "5", MaxErrors: "100%"})
	other := fleetruns.New(f.pool, f.q, fleetruns.Options{})
	for range 40 {
		var wg sync.WaitGroup
		for _, s := range []*fleetruns.Service{f.s, other, f.s} {
			wg.Go(func() { require.NoError(t, s.AdvanceOnce(f.ctx)) })
		}
		wg.Wait()
		open := f.open(t, run.ID)
		require.LessOrEqual(t, len(open), 5)
		if len(open) == 0 {
			break
		}
		for _, c := range open {
			f.settle(t, c, queue.Succeeded, "")
		}
	}
	require.NoError(t, f.s.AdvanceOnce(f.ctx))
	run = f.get(t, run.ID)
	require.Equal(t, fleetruns.StateSucceeded, run.State)
	var n int
	require.NoError(t, f.pool.QueryRow(f.ctx, `SELECT count(*) FROM commands WHERE idempotency_key LIKE 'run:' || $1 || ':%'`, run.ID).Scan(&n))
	require.Equal(t, 30, n, "one command per node")
}

// Pause stops new starts; resume lets them go on; cancel cancels the
// pending commands at once and ends the run cancelled with the rest
// not-started.
func TestPauseResumeCancel(t *testing.T) {
	f := setup(t, 6)
	run := f.create(t, fleetruns.CreateParams{Targets: fleetruns.Targets{All: true}, MaxConcurrency: "2"})
	require.NoError(t, f.s.AdvanceOnce(f.ctx))
	open := f.open(t, run.ID)
	require.Len(t, open, 2)
	paused, err := f.s.Pause(f.ctx, f.tenant, run.ID, "ops")
	require.NoError(t, err)
	require.Equal(t, fleetruns.StatePaused, paused.State)
	for _, c := range open {
		f.settle(t, c, queue.Succeeded, "")
	}
	require.NoError(t, f.s.AdvanceOnce(f.ctx))
	require.Empty(t, f.open(t, run.ID), "a paused run starts nothing")
	require.Equal(t, fleetruns.WaitPaused, f.get(t, run.ID).WaitingReason)
	_, err = f.s.Resume(f.ctx, f.tenant, run.ID, "ops")
	require.NoError(t, err)
	require.NoError(t, f.s.AdvanceOnce(f.ctx))
	open = f.open(t, run.ID)
	require.Len(t, open, 2)
	// One in flight (dispatched), one pending.
	_, _, err = f.q.Transition(f.ctx, f.pool, queue.Transition{CommandID: open[0].ID, To: queue.Dispatched})
	require.NoError(t, err)
	c, err := f.s.Cancel(f.ctx, f.tenant, run.ID, "ops")
	require.NoError(t, err)
	require.Equal(t, fleetruns.StateCancelling, c.State, "an in-flight command is still open")
	require.NotNil(t, c.CancelRequest)
	require.Equal(t, 2, c.Counts.ByState[fleetruns.TargetNotStarted])
	require.Equal(t, 1, c.Counts.ByState[fleetruns.TargetCancelled], "the pending command was cancelled at once")
	inflight, err := f.q.Get(f.ctx, f.pool, "", open[0].ID)
	require.NoError(t, err)
	require.NotNil(t, inflight.CancelRequestedAt, "the in-flight one got a cancel request")
	f.settle(t, inflight, queue.Cancelled, queue.ReasonCancelled)
	require.NoError(t, f.s.AdvanceOnce(f.ctx))
	end := f.get(t, run.ID)
	require.Equal(t, fleetruns.StateCancelled, end.State)
	_, err = f.s.Resume(f.ctx, f.tenant, run.ID, "ops")
	require.ErrorIs(t, err, errcode.ErrInvalidState, "an ended run cannot resume")
}

// "Bad input gets a clear error naming what was wrong".
func TestCreateRefusesBadInput(t *testing.T) {
	f := setup(t, 2)
	f.label(t, f.nodes[0], map[string]string{"gpu": "h200"})
	other := newFixture(t, 1)
	otherRun := other.create(t, fleetruns.CreateParams{Targets: fleetruns.Targets{All: true}})
	for name, tc := range map[string]struct {
		p    fleetruns.CreateParams
		code errcode.Code
		want string
	}{
		"empty targets":           {fleetruns.CreateParams{}, errcode.InvalidInput, "targets select no node"},
		"selects nothing":         {fleetruns.CreateParams{Targets: fleetruns.Targets{Selector: "gpu=b200"}}, errcode.InvalidInput, "select no node"},
		"selector does not parse": {fleetruns.CreateParams{Targets: fleetruns.Targets{Selector: "gpu in (h200"}}, errcode.InvalidInput, "'(' without ')'"},
		"concurrency 0":           {fleetruns.CreateParams{Targets: fleetruns.Targets{All: true}, MaxConcurrency: "0"}, errcode.InvalidInput, "maxConcurrency 0 would start nothing"},
		"concurrency over 100%":   {fleetruns.CreateParams{Targets: fleetruns.Targets{All: true}, MaxConcurrency: "120%"}, errcode.InvalidInput, "0% to 100%"},
		"errors negative":         {fleetruns.CreateParams{Targets: fleetruns.Targets{All: true}, MaxErrors: "-1"}, errcode.InvalidInput, "maxErrors -1 must not be negative"},
		"errors not a number":     {fleetruns.CreateParams{Targets: fleetruns.Targets{All: true}, MaxErrors: "a few"}, errcode.InvalidInput, "want a count"},
		"unknown pool":            {fleetruns.CreateParams{Targets: fleetruns.Targets{Pool: "gpu-east"}}, errcode.InvalidInput, "pool gpu-east"},
		"unknown label key":       {fleetruns.CreateParams{Targets: fleetruns.Targets{Selector: "rakc=r1"}}, errcode.InvalidInput, "rakc"},
		"all with more":           {fleetruns.CreateParams{Targets: fleetruns.Targets{All: true, Pool: "default"}}, errcode.InvalidInput, "takes no other criterion"},
		"bad node id":             {fleetruns.CreateParams{Targets: fleetruns.Targets{NodeIDs: []string{"node/1"}}}, errcode.InvalidInput, "nodeIds[0]"},
		"destructive, no reason":  {fleetruns.CreateParams{Kind: "node.reboot", Targets: fleetruns.Targets{All: true}}, errcode.InvalidInput, "needs a reason"},
	} {
		t.Run(name, func(t *testing.T) {
			p := tc.p
			p.TenantID, p.NotAfterSeconds, p.Requester = f.tenant, 600, "ops"
			if p.Kind == "" {
				p.Kind = "diag.nvml"
			}
			_, _, err := f.s.Create(f.ctx, p)
			require.Error(t, err)
			require.Equal(t, tc.code, errcode.CodeOf(err), "%v", err)
			require.Contains(t, err.Error(), tc.want)
		})
	}
	_, err := f.s.Get(f.ctx, f.tenant, otherRun.ID)
	require.ErrorIs(t, err, errcode.ErrNotFound, "a run id of another tenant is NOT_FOUND")
	_, err = f.s.Pause(f.ctx, f.tenant, otherRun.ID, "ops")
	require.ErrorIs(t, err, errcode.ErrNotFound)
}

// "a node the caller may not touch is listed as refused with the reason,
// never silently dropped"; so is a listed node that does not exist.
func TestCreateListsRefusedNodes(t *testing.T) {
	f := setup(t, 3)
	p := fleetruns.CreateParams{Targets: fleetruns.Targets{NodeIDs: []string{f.nodes[0], f.nodes[1], "node_missing"}},
		Authorize: func(node string) string {
			if node == f.nodes[1] {
				return "missing compute:nodes:exec on compute-node/" + node
			}
			return ""
		}}
	run := f.create(t, p)
	require.Equal(t, 3, run.Counts.Targets)
	require.Equal(t, 2, run.Counts.ByState[fleetruns.TargetRefused])
	require.Len(t, run.Refused, 2)
	reasons := map[string]string{}
	for _, r := range run.Refused {
		reasons[r.NodeID] = r.Reason
	}
	require.Equal(t, map[string]string{f.nodes[1]: fleetruns.ReasonPermission, "node_missing": fleetruns.ReasonNotFound}, reasons)
	again, dup, err := f.s.Create(f.ctx, fleetruns.CreateParams{TenantID: f.tenant, Kind: "diag.nvml", NotAfterSeconds: 600, Requester: "ops",
		Targets: fleetruns.Targets{All: true}, IdempotencyKey: "same"})
	require.NoError(t, err)
	require.False(t, dup)
	retry, dup, err := f.s.Create(f.ctx, fleetruns.CreateParams{TenantID: f.tenant, Kind: "diag.nvml", NotAfterSeconds: 600, Requester: "ops",
		Targets: fleetruns.Targets{All: true}, IdempotencyKey: "same"})
	require.NoError(t, err)
	require.True(t, dup, "a retry returns the same run")
	require.Equal(t, again.ID, retry.ID)
	_, _, err = f.s.Create(f.ctx, fleetruns.CreateParams{TenantID: f.tenant, Kind: "diag.nvml", NotAfterSeconds: 600, Requester: "ops",
		Targets: fleetruns.Targets{NodeIDs: []string{f.nodes[1]}}, Authorize: p.Authorize})
	require.ErrorIs(t, err, errcode.ErrPermissionDenied, "a run with no node it may start is refused whole")
}
