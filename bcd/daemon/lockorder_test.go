package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/bcd/journal"
	"github.com/better-compute/commands/bcd/lanes"
	"github.com/better-compute/commands/internal/testutil"
	"github.com/better-compute/commands/sdk/example"
	"github.com/better-compute/commands/sdk/kind"
)

// gatedExec stands in for the plugin host, with example.echo's manifest,
// so that a test knows where a run is: Execute closes started, waits for
// proceed, closes progressing and reports one progress step, closes
// waiting, and succeeds once done is closed.
type gatedExec struct {
	started, proceed, progressing, waiting, done chan struct{}
}

func newGatedExec() *gatedExec {
	return &gatedExec{make(chan struct{}), make(chan struct{}), make(chan struct{}), make(chan struct{}), make(chan struct{})}
}

func (g *gatedExec) Manifests() []kind.Manifest { return []kind.Manifest{example.EchoManifest} }

func (g *gatedExec) Manifest(k string) (kind.Manifest, bool) {
	return example.EchoManifest, k == example.EchoManifest.Kind
}

func (g *gatedExec) Execute(ctx context.Context, _ kind.Command, progress func(int, string)) (kind.Result, error) {
	close(g.started)
	select {
	case <-g.proceed:
	case <-ctx.Done():
		return kind.Result{Status: kind.StatusCancelled}, ctx.Err()
	}
	close(g.progressing)
	progress(50, "halfway")
	close(g.waiting)
	select {
	case <-g.done:
		return kind.Result{Status: kind.StatusSucceeded, Data: json.RawMessage(`{}`)}, nil
	case <-ctx.Done():
		return kind.Result{Status: kind.StatusCancelled}, ctx.Err()
	}
}

// within fails the test unless f returns within limit: how a lock held
// while another waits shows in a test, rather than as a hung run.
func within(t *testing.T, limit time.Duration, what string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	select {
	case <-done:
	case <-time.After(limit):
		t.Fatalf("%s did not return within %s: the daemon lock is held while a send waits", what, limit)
	}
}

// reach waits for ch to be closed: the run reached that point.
func reach(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(30 * time.Second):
		t.Fatalf("the run did not reach %s", what)
	}
}

// TestLockOrder_ASendThatWaitsNeverHoldsUpTheDaemonLock checks the order
// Daemon.lock states: publish and finish release the daemon lock before
// they take the entry's sendLock. The test holds sendLock, standing for a
// send that waits for a slow watcher, while a progress step and then the
// outcome reach it; Submit, InFlight and Cancel must answer all the while.
// Were the daemon lock held across the wait for sendLock, they would hang.
func TestLockOrder_ASendThatWaitsNeverHoldsUpTheDaemonLock(t *testing.T) {
	lg := logger(t)
	dir := t.TempDir()
	j, err := journal.Open(lg, dir, journal.Options{})
	require.NoError(t, err)
	st, err := NewState(dir, j)
	require.NoError(t, err)
	ex := newGatedExec()
	d, err := New(lg, Config{NodeID: nodeID, Role: "node", BootID: "boot-1"}, j, st, ex)
	require.NoError(t, err)
	t.Cleanup(func() {
		require.NoError(t, d.Close())
		require.NoError(t, j.Close())
	})
	const limit = 10 * time.Second
	// answers checks, for a while, that whoever needs the daemon lock gets
	// it; the while gives a publish or finish time to reach sendLock.
	answers := func() {
		t.Helper()
		for end := time.Now().Add(100 * time.Millisecond); time.Now().Before(end); {
			within(t, limit, "InFlight", func() { d.InFlight() })
			var err error
			within(t, limit, "Cancel of an unknown command", func() { err = d.Cancel("cmd_unknown") })
			require.ErrorIs(t, err, ErrNotFound)
		}
	}

	c := cmd("cmd_lock_order", example.EchoManifest.Kind, map[string]any{"message": "hi"})
	ch, err := d.Submit(context.Background(), c)
	require.NoError(t, err)
	reach(t, ex.started, "Execute") // accepted and running are published
	d.lock.Lock()
	e := d.active[c.ID]
	d.lock.Unlock()
	require.NotNil(t, e)

	e.sendLock.Lock()
	held := true
	defer func() {
		if held {
			e.sendLock.Unlock()
		}
	}()
	// publish: the progress step waits for sendLock.
	close(ex.proceed)
	reach(t, ex.progressing, "its progress step")
	answers()
	var dup <-chan Update
	within(t, limit, "Submit of a duplicate that re-attaches", func() { dup, err = d.Submit(context.Background(), c) })
	require.NoError(t, err)
	e.sendLock.Unlock()
	reach(t, ex.waiting, "the end of its progress step")

	// finish: the outcome waits for sendLock, the entry already forgotten.
	e.sendLock.Lock()
	close(ex.done)
	testutil.WaitFor(t, limit, "finish to forget the command", func() bool {
		var ids []string
		within(t, limit, "InFlight", func() { ids = d.InFlight() })
		return len(ids) == 0
	})
	answers()
	var fromJournal <-chan Update
	within(t, limit, "Submit of a duplicate answered from the journal", func() { fromJournal, err = d.Submit(context.Background(), c) })
	require.NoError(t, err)
	within(t, limit, "Cancel of a finished command", func() { err = d.Cancel(c.ID) })
	require.NoError(t, err)
	held = false
	e.sendLock.Unlock()

	for _, ch := range []<-chan Update{ch, dup, fromJournal} {
		require.Equal(t, journal.StateSucceeded, last(t, collect(t, ch)).State)
	}
}

// TestLockOrder_ConcurrentSubmitsCancelsAndOutcomes drives, all at once,
// the paths that take Daemon.lock or an entry's sendLock: duplicates that
// re-attach or are answered from the journal, cancels before and during
// runs, progress steps, BUSY refusals and outcomes. Under -race it catches
// a field touched outside its lock; a lock taken out of order shows as a
// call or a watcher that never returns.
func TestLockOrder_ConcurrentSubmitsCancelsAndOutcomes(t *testing.T) {
	// Two commands more than the control lane's workers: some are BUSY.
	n := start(t, "", nil)
	commands, duplicates := lanes.DefaultSizes.Control+2, 4
	chans := make(chan (<-chan Update), commands*duplicates)
	errs := make(chan error, 2*commands*duplicates)
	var wg sync.WaitGroup
	for i := range commands {
		c := cmd(fmt.Sprintf("cmd_race_%d", i), "example.echo", map[string]any{"message": "hi", "sleepMs": 50})
		for range duplicates {
			wg.Add(2)
			go func() {
				defer wg.Done()
				ch, err := n.d.Submit(context.Background(), c)
				if err != nil {
					errs <- err
					return
				}
				chans <- ch
			}()
			go func() {
				defer wg.Done()
				n.d.InFlight()
				if i%2 == 0 {
					if err := n.d.Cancel(c.ID); err != nil && !errors.Is(err, ErrNotFound) {
						errs <- err
					}
				}
			}()
		}
	}
	within(t, 60*time.Second, "the submits and cancels", wg.Wait)
	close(chans)
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	for ch := range chans {
		require.True(t, last(t, collect(t, ch)).Terminal())
	}
}
