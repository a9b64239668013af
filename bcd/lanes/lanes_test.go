package lanes

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/internal/testutil"
	"github.com/better-compute/commands/sdk/kind"
)

// fill occupies every worker of lane l and returns a release function.
func fill(t *testing.T, p *Pool, l kind.Lane) func() {
	t.Helper()
	release := make(chan struct{})
	var started sync.WaitGroup
	for i := 0; i < p.Sizes().Of(l); i++ {
		started.Add(1)
		require.NoError(t, p.TryRun(l, func(func()) { started.Done(); <-release }))
	}
	started.Wait()
	return func() { close(release) }
}

func TestPool_DefaultSizesMatchTheGatewayCredits(t *testing.T) {
	// Spec: "The gateway keeps at most 8 control, 4 provision and 2 bulk
	// commands outstanding per session ... The daemon runs each lane on its
	// own fixed worker pool."
	p := New(Sizes{})
	defer p.Close()
	require.Equal(t, Sizes{Control: 8, Provision: 4, Bulk: 2}, p.Sizes())
	for _, l := range kind.Lanes {
		release := fill(t, p, l)
		require.Equal(t, p.Sizes().Of(l), p.InUse(l))
		require.False(t, p.Free(l))
		err := p.TryRun(l, func(func()) {})
		require.ErrorIs(t, err, ErrBusy, "lane %s is full", l)
		release()
	}
}

func TestPool_BusyLaneDoesNotBlockOthers(t *testing.T) {
	p := New(Sizes{Control: 1, Provision: 1, Bulk: 1})
	defer p.Close()
	release := fill(t, p, kind.LaneBulk)
	defer release()
	require.ErrorIs(t, p.TryRun(kind.LaneBulk, func(func()) {}), ErrBusy)
	done := make(chan struct{})
	require.NoError(t, p.TryRun(kind.LaneControl, func(func()) { close(done) }))
	<-done
}

func TestPool_WorkerFreedAfterJob(t *testing.T) {
	p := New(Sizes{Control: 1, Provision: 1, Bulk: 1})
	defer p.Close()
	release := fill(t, p, kind.LaneControl)
	require.ErrorIs(t, p.TryRun(kind.LaneControl, func(func()) {}), ErrBusy)
	release()
	// The slot comes back when the job's worker returns: wait for that event.
	ran := make(chan struct{})
	testutil.WaitFor(t, 10*time.Second, "the control worker to come back", func() bool {
		err := p.TryRun(kind.LaneControl, func(func()) { close(ran) })
		if err != nil {
			require.ErrorIs(t, err, ErrBusy)
		}
		return err == nil
	})
	<-ran
}

func TestPool_RunWaitsForAWorker(t *testing.T) {
	p := New(Sizes{Control: 1, Provision: 1, Bulk: 1})
	defer p.Close()
	release := fill(t, p, kind.LaneProvision)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	require.ErrorIs(t, p.Run(ctx, kind.LaneProvision, func(func()) {}), context.Canceled)
	ran := make(chan struct{})
	errc := make(chan error, 1)
	go func() { errc <- p.Run(context.Background(), kind.LaneProvision, func(func()) { close(ran) }) }()
	release()
	require.NoError(t, <-errc)
	<-ran
}

func TestPool_ClosedRefuses(t *testing.T) {
	p := New(Sizes{})
	p.Close()
	err := p.TryRun(kind.LaneControl, func(func()) {})
	require.True(t, errors.Is(err, ErrClosed))
	p.Close() // idempotent
}

func TestSizes_Validate(t *testing.T) {
	require.NoError(t, Sizes{}.Validate())
	require.NoError(t, Sizes{Control: 16}.Validate())
	require.Error(t, Sizes{Bulk: -1}.Validate())
	require.Error(t, Sizes{Provision: 5000}.Validate())
}

func TestPool_EarlyRelease(t *testing.T) {
	// A job that releases its slot before it reports lets the next command
	// in at once, while its worker is still returning.
	p := New(Sizes{Control: 1, Provision: 1, Bulk: 1})
	defer p.Close()
	released := make(chan struct{})
	finish := make(chan struct{})
	require.NoError(t, p.TryRun(kind.LaneControl, func(release func()) {
		release()
		release() // idempotent
		close(released)
		<-finish
	}))
	<-released
	ran := make(chan struct{})
	require.NoError(t, p.TryRun(kind.LaneControl, func(func()) { close(ran) }), "the slot is free")
	require.ErrorIs(t, p.TryRun(kind.LaneControl, func(func()) {}), ErrBusy, "one slot: taken by the queued job")
	close(finish)
	<-ran
}
