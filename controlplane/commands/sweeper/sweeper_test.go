package sweeper_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/controlplane/commands/events"
	"github.com/better-compute/commands/controlplane/commands/kinds"
	"github.com/better-compute/commands/controlplane/commands/queue"
	"github.com/better-compute/commands/controlplane/commands/sweeper"
	"github.com/better-compute/commands/controlplane/internal/storetest"
	"github.com/better-compute/commands/internal/testutil"
	"github.com/better-compute/commands/sdk/kind"
)

var (
	ctlKind = kind.Manifest{Kind: "test.ctl", Lane: kind.LaneControl, Timeout: kind.Duration(time.Minute),
		Roles: []string{"node"}, Flags: kind.Flags{RetrySafe: true}, Version: "1.0.0"}
	// goneKind is registered when its commands are queued and missing from
	// the sweeper's registry: "a kind that is no longer registered".
	goneKind = kind.Manifest{Kind: "test.gone", Lane: kind.LaneControl, Timeout: kind.Duration(time.Hour),
		Roles: []string{"node"}, Version: "1.0.0"}
)

type bundle struct {
	ctx   context.Context
	pool  *pgxpool.Pool
	q     *queue.Queue // the sweeper's: test.gone is not registered
	full  *queue.Queue // the enqueuer's
	node  queue.Node
	nodes *recorder
	wfs   *recorder
}

// recorder is a Waker that remembers what it was woken for.
type recorder struct {
	lock sync.Mutex
	ids  []string
}

func (r *recorder) Wake(_ context.Context, id string) {
	r.lock.Lock()
	defer r.lock.Unlock()
	r.ids = append(r.ids, id)
}

func (r *recorder) got() []string {
	r.lock.Lock()
	defer r.lock.Unlock()
	return append([]string(nil), r.ids...)
}

func setup(t *testing.T) *bundle {
	t.Helper()
	t.Parallel()
	ctx := context.Background()
	pool := storetest.DB(t)
	full, err := kinds.NewRegistry(ctlKind, goneKind)
	require.NoError(t, err)
	reg, err := kinds.NewRegistry(ctlKind)
	require.NoError(t, err)
	b := &bundle{ctx: ctx, pool: pool, q: queue.New(reg, hclog.NewNullLogger()), full: queue.New(full, hclog.NewNullLogger()),
		nodes: &recorder{}, wfs: &recorder{}}
	ten, err := b.full.CreateTenant(ctx, pool, queue.Tenant{Name: "acme"})
	require.NoError(t, err)
	b.node, err = b.full.CreateNode(ctx, pool, queue.Node{TenantID: ten.ID})
	require.NoError(t, err)
	return b
}

func (b *bundle) sweeper(t *testing.T, holder string, interval time.Duration) *sweeper.Sweeper {
	nodes, wfs := &sweeper.Wakers{}, &sweeper.Wakers{}
	nodes.Register(b.nodes)
	wfs.Register(b.wfs)
	return sweeper.New(b.pool, b.q, sweeper.Options{Interval: interval, Holder: holder, Nodes: nodes, Workflows: wfs})
}

// command queues kind in state, with not_after moved to age before now.
func (b *bundle) command(t *testing.T, k, key string, state queue.State, age time.Duration) queue.Command {
	t.Helper()
	var c queue.Command
	require.NoError(t, pgx.BeginFunc(b.ctx, b.pool, func(tx pgx.Tx) error {
		var err error
		c, _, err = b.full.Enqueue(b.ctx, tx, queue.EnqueueParams{NodeID: b.node.ID, Kind: k, IdempotencyKey: key})
		return err
	}))
	// Fixtures: the clock cannot be moved, so the deadline is.
	_, err := b.pool.Exec(b.ctx, `UPDATE commands SET state = $2, not_after = now() - $3 * interval '1 microsecond' WHERE id = $1`,
		c.ID, string(state), age.Microseconds())
	require.NoError(t, err)
	return c
}

func (b *bundle) get(t *testing.T, id string) queue.Command {
	t.Helper()
	c, err := b.q.Get(b.ctx, b.pool, b.node.ID, id)
	require.NoError(t, err)
	return c
}

// lead makes s the leader by one tick of its election.
func lead(t *testing.T, b *bundle, s *sweeper.Sweeper) {
	t.Helper()
	ctx, cancel := context.WithCancel(b.ctx)
	done := make(chan struct{})
	go func() { defer close(done); s.Run(ctx) }()
	testutil.WaitFor(t, 10*time.Second, "leadership", s.Leading)
	t.Cleanup(func() { cancel(); <-done })
}

// "pending past not_after becomes expired (reason not_after); dispatched,
// acked or running past not_after plus the kind's timeout becomes failed
// (reason timeout)."
func TestExpiryAndTimeoutRules(t *testing.T) {
	b := setup(t)
	s := b.sweeper(t, "a", time.Hour)
	pendingLate := b.command(t, ctlKind.Kind, "p-late", queue.Pending, time.Second)
	pendingOK := b.command(t, ctlKind.Kind, "p-ok", queue.Pending, -time.Minute)
	inGrace := map[queue.State]queue.Command{}
	overdue := map[queue.State]queue.Command{}
	for _, st := range []queue.State{queue.Dispatched, queue.Acked, queue.Running} {
		// Past not_after but within the kind's one-minute timeout: left alone.
		inGrace[st] = b.command(t, ctlKind.Kind, "g-"+string(st), st, 30*time.Second)
		overdue[st] = b.command(t, ctlKind.Kind, "o-"+string(st), st, 61*time.Second)
	}
	lead(t, b, s)
	// The leader sweeps on its first tick, which may still be under way
	// when Leading reports true (a loaded machine): sweep once more, then a
	// further sweep finds nothing.
	_, err := s.Sweep(b.ctx)
	require.NoError(t, err)
	n, err := s.Sweep(b.ctx)
	require.NoError(t, err)
	require.Zero(t, n)

	c := b.get(t, pendingLate.ID)
	require.Equal(t, queue.Expired, c.State)
	require.Equal(t, queue.ReasonNotAfter, c.Reason)
	require.Equal(t, queue.Pending, b.get(t, pendingOK.ID).State)
	for st, c := range inGrace {
		require.Equal(t, st, b.get(t, c.ID).State, "within the timeout")
	}
	for _, c := range overdue {
		got := b.get(t, c.ID)
		require.Equal(t, queue.Failed, got.State)
		require.Equal(t, queue.ReasonTimeout, got.Reason)
	}
}

// "A kind that is no longer registered gets 15 minutes."
func TestUnregisteredKindGetsFifteenMinutes(t *testing.T) {
	b := setup(t)
	s := b.sweeper(t, "a", time.Hour)
	within := b.command(t, goneKind.Kind, "within", queue.Running, 14*time.Minute)
	past := b.command(t, goneKind.Kind, "past", queue.Running, 15*time.Minute+time.Second)
	lead(t, b, s)
	// Leading can be true before the first tick's sweep ends: sweep here.
	_, err := s.Sweep(b.ctx)
	require.NoError(t, err)
	require.Equal(t, queue.Running, b.get(t, within.ID).State, "the manifest's own hour no longer applies, nor is it shortened below 15 minutes")
	got := b.get(t, past.ID)
	require.Equal(t, queue.Failed, got.State)
	require.Equal(t, queue.ReasonTimeout, got.Reason)
}

// "Each transition wakes the node's controller and the owner named by the
// idempotency key (wf:<workflowId>:… wakes that workflow), and publishes
// command.settled."
func TestTransitionsWakeOwnersAndPublishSettledOnce(t *testing.T) {
	b := setup(t)
	s := b.sweeper(t, "a", time.Hour)
	wf := b.command(t, ctlKind.Kind, queue.WorkflowKey("wf_42", "reboot"), queue.Pending, time.Second)
	plain := b.command(t, ctlKind.Kind, "api-ish", queue.Running, 2*time.Minute)
	lead(t, b, s)
	for i := 0; i < 3; i++ {
		_, err := s.Sweep(b.ctx)
		require.NoError(t, err)
	}
	require.ElementsMatch(t, []string{b.node.ID, b.node.ID}, b.nodes.got())
	require.Equal(t, []string{"wf_42"}, b.wfs.got())
	for _, c := range []queue.Command{wf, plain} {
		var n int
		require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT count(*) FROM outbox WHERE topic = $1 AND payload->>'commandId' = $2`,
			events.TopicCommandSettled, c.ID).Scan(&n))
		require.Equal(t, 1, n, "command.settled exactly once for %s", c.ID)
	}
	var reason string
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT payload->>'reason' FROM outbox WHERE topic = $1 AND payload->>'commandId' = $2`,
		events.TopicCommandSettled, wf.ID).Scan(&reason))
	require.Equal(t, queue.ReasonNotAfter, reason)
}

// "The CommandSweeper runs once in the fleet": two sweepers, one leader; when
// it stops it resigns and the other takes over.
func TestTwoSweepersOnlyOneLeads(t *testing.T) {
	b := setup(t)
	type runner struct {
		s    *sweeper.Sweeper
		stop context.CancelFunc
		done chan struct{}
	}
	start := func(holder string) *runner {
		ctx, cancel := context.WithCancel(b.ctx)
		r := &runner{s: b.sweeper(t, holder, 20*time.Millisecond), stop: cancel, done: make(chan struct{})}
		go func() { defer close(r.done); r.s.Run(ctx) }()
		t.Cleanup(func() { cancel(); <-r.done })
		return r
	}
	ra, rb := start("a"), start("b")
	testutil.WaitFor(t, 10*time.Second, "a leader", func() bool { return ra.s.Leading() || rb.s.Leading() })

	var holder string
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT holder FROM leader_leases WHERE name = $1`, sweeper.LeaseName).Scan(&holder))
	leader, follower := ra, rb
	if holder == "b" {
		leader, follower = rb, ra
	}
	// The term (TTL 60ms, renewed every 20ms tick) stays with its holder.
	for i := 0; i < 20; i++ {
		require.False(t, ra.s.Leading() && rb.s.Leading(), "two leaders")
	}
	leader.stop()
	<-leader.done
	require.False(t, leader.s.Leading())
	testutil.WaitFor(t, 10*time.Second, "the follower to take over", follower.s.Leading)
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT holder FROM leader_leases WHERE name = $1`, sweeper.LeaseName).Scan(&holder))
	require.NotEqual(t, "", holder)
	require.False(t, leader.s.Leading())
}

// "a lease with terms that an old leader cannot renew": once a term has
// expired and another holder was elected, the old one can neither renew nor
// resign the new term, and steps down.
func TestOldLeaderCannotRenew(t *testing.T) {
	b := setup(t)
	old := sweeper.NewLease(b.pool, "test-lease", "old", time.Minute)
	won, err := old.Elect(b.ctx)
	require.NoError(t, err)
	require.True(t, won)
	other := sweeper.NewLease(b.pool, "test-lease", "new", time.Minute)
	won, err = other.Elect(b.ctx)
	require.NoError(t, err)
	require.False(t, won, "an unexpired lease is not taken")

	// The old leader stalls past its expiry (the clock cannot be moved, so
	// the lease is).
	_, err = b.pool.Exec(b.ctx, `UPDATE leader_leases SET expires_at = now() - interval '1 second' WHERE name = 'test-lease'`)
	require.NoError(t, err)
	ok, err := old.Renew(b.ctx, b.pool)
	require.NoError(t, err)
	require.False(t, ok, "an expired term does not renew")
	require.Empty(t, old.Term(), "and its holder steps down")

	won, err = other.Elect(b.ctx)
	require.NoError(t, err)
	require.True(t, won)
	newTerm := other.Term()
	require.NoError(t, old.Resign(b.ctx))
	var holder, term string
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT holder, term FROM leader_leases WHERE name = 'test-lease'`).Scan(&holder, &term))
	require.Equal(t, "new", holder)
	require.Equal(t, newTerm, term)
	ok, err = other.Renew(b.ctx, b.pool)
	require.NoError(t, err)
	require.True(t, ok)
}

// An old leader's sweep renews its term in the same transaction, so it
// settles nothing once the term is gone.
func TestSweepUnderALostTermSettlesNothing(t *testing.T) {
	b := setup(t)
	s := b.sweeper(t, "a", time.Hour)
	lead(t, b, s)
	late := b.command(t, ctlKind.Kind, "late", queue.Pending, time.Second)
	_, err := b.pool.Exec(b.ctx, `UPDATE leader_leases SET holder = 'someone-else', term = 'x' WHERE name = $1`, sweeper.LeaseName)
	require.NoError(t, err)
	n, err := s.Sweep(b.ctx)
	require.NoError(t, err)
	require.Zero(t, n)
	require.Equal(t, queue.Pending, b.get(t, late.ID).State)
}

func TestWorkflowOf(t *testing.T) {
	require.Equal(t, "wf_1", sweeper.WorkflowOf("wf:wf_1:step-2"))
	require.Equal(t, "", sweeper.WorkflowOf("wf:nostep"))
	require.Equal(t, "", sweeper.WorkflowOf("api:abc"))
	require.Equal(t, "", sweeper.WorkflowOf("acceptance:node_1:1:diag.nvml"))
}
