package pools_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/controlplane/commands/kinds"
	"github.com/better-compute/commands/controlplane/commands/queue"
	"github.com/better-compute/commands/controlplane/fleet/pools"
	"github.com/better-compute/commands/controlplane/internal/errcode"
	"github.com/better-compute/commands/controlplane/internal/storetest"
)

type bundle struct {
	ctx    context.Context
	pool   *pgxpool.Pool
	tenant string
	nodes  []string
}

func setup(t *testing.T, n int) *bundle {
	t.Helper()
	t.Parallel()
	ctx := context.Background()
	db := storetest.DB(t)
	reg, err := kinds.NewRegistry()
	require.NoError(t, err)
	q := queue.New(reg, hclog.NewNullLogger())
	ten, err := q.CreateTenant(ctx, db, queue.Tenant{Name: "acme"})
	require.NoError(t, err)
	b := &bundle{ctx: ctx, pool: db, tenant: ten.ID}
	for range n {
		nd, err := q.CreateNode(ctx, db, queue.Node{TenantID: ten.ID})
		require.NoError(t, err)
		b.nodes = append(b.nodes, nd.ID)
	}
	return b
}

func (b *bundle) acquire(t *testing.T, node, rem string) (pools.Lock, *pools.Wait) {
	t.Helper()
	var (
		l pools.Lock
		w *pools.Wait
	)
	require.NoError(t, pgx.BeginFunc(b.ctx, b.pool, func(tx pgx.Tx) error {
		var err error
		l, w, err = pools.Acquire(b.ctx, tx, pools.LockRequest{NodeID: node, TenantID: b.tenant, Pool: pools.DefaultPool,
			Holder: "health", RemediationID: rem, Action: "node.reboot"})
		if err != nil || w != nil {
			return err
		}
		// The caller starts its remediation in the same transaction.
		_, err = tx.Exec(b.ctx, `INSERT INTO remediations (id, node_id, tenant_id, pool, owner, action, trigger, state, started_at)
			VALUES ($1, $2, $3, 'default', 'health', 'node.reboot', 'RebootRequired', 'running', now())`, rem, node, b.tenant)
		return err
	}))
	return l, w
}

func (b *bundle) setBudget(t *testing.T, bud pools.Budget) pools.Budget {
	t.Helper()
	var out pools.Budget
	require.NoError(t, pgx.BeginFunc(b.ctx, b.pool, func(tx pgx.Tx) error {
		var err error
		out, err = pools.Set(b.ctx, tx, bud, "ops")
		return err
	}))
	return out
}

// "how many nodes may be in disruptive maintenance at once": with
// maxConcurrent 2 the third lock waits, naming the budget; a release lets
// the next in. A locked node keeps a second remediation off it.
func TestAcquireKeepsTheConcurrentBudget(t *testing.T) {
	b := setup(t, 4)
	bud := pools.Defaults(b.tenant, pools.DefaultPool)
	bud.MaxConcurrent = 2
	b.setBudget(t, bud)
	_, w := b.acquire(t, b.nodes[0], "rem_0")
	require.Nil(t, w)
	_, w = b.acquire(t, b.nodes[1], "rem_1")
	require.Nil(t, w)
	_, w = b.acquire(t, b.nodes[2], "rem_2")
	require.NotNil(t, w)
	require.Equal(t, pools.WaitBudgetConcurrent, w.Reason)
	require.Contains(t, w.Message, "2 of 2 node(s)")
	_, w = b.acquire(t, b.nodes[0], "rem_x")
	require.NotNil(t, w)
	require.Equal(t, pools.WaitNodeLocked, w.Reason, "a per-node maintenance lock row keeps two remediations off one node")

	require.NoError(t, pgx.BeginFunc(b.ctx, b.pool, func(tx pgx.Tx) error {
		ok, err := pools.Release(b.ctx, tx, b.nodes[0], "rem_0")
		require.True(t, ok)
		return err
	}))
	_, w = b.acquire(t, b.nodes[2], "rem_2")
	require.Nil(t, w)
	locks, err := pools.ListLocks(b.ctx, b.pool, b.tenant, "")
	require.NoError(t, err)
	require.Len(t, locks, 2)
}

// "and how many per time window": with maxPerWindow 1 the second start
// within the window waits, though the first finished.
func TestAcquireKeepsTheWindowBudget(t *testing.T) {
	b := setup(t, 2)
	bud := pools.Defaults(b.tenant, pools.DefaultPool)
	bud.MaxConcurrent, bud.MaxPerWindow, bud.Window = 5, 1, time.Hour
	b.setBudget(t, bud)
	_, w := b.acquire(t, b.nodes[0], "rem_0")
	require.Nil(t, w)
	require.NoError(t, pgx.BeginFunc(b.ctx, b.pool, func(tx pgx.Tx) error {
		_, err := pools.Release(b.ctx, tx, b.nodes[0], "rem_0")
		return err
	}))
	_, w = b.acquire(t, b.nodes[1], "rem_1")
	require.NotNil(t, w)
	require.Equal(t, pools.WaitBudgetWindow, w.Reason)
	require.Contains(t, w.Message, "1 of 1 remediation(s) in the last 1h0m0s")
}

// Many replicas acquiring at once never put more nodes in maintenance than
// the budget: the pool's row makes them take turns.
func TestAcquireConcurrentCallersNeverExceedTheBudget(t *testing.T) {
	b := setup(t, 12)
	bud := pools.Defaults(b.tenant, pools.DefaultPool)
	bud.MaxConcurrent = 3
	b.setBudget(t, bud)
	var got atomic.Int32
	var wg sync.WaitGroup
	for i, n := range b.nodes {
		wg.Go(func() {
			if _, w := b.acquire(t, n, fmt.Sprintf("rem_%d", i)); w == nil {
				got.Add(1)
			}
		})
	}
	wg.Wait()
	require.EqualValues(t, 3, got.Load())
	st, err := pools.GetStatus(b.ctx, b.pool, b.tenant, pools.DefaultPool)
	require.NoError(t, err)
	require.Equal(t, 3, st.InMaintenance)
	require.Equal(t, 12, st.Nodes)
}

// The breaker, once tripped, stops all remediation in the pool and raises
// an alert event; an operator's reset lets work in again.
func TestBreakerStopsThePoolUntilReset(t *testing.T) {
	b := setup(t, 1)
	require.NoError(t, pgx.BeginFunc(b.ctx, b.pool, func(tx pgx.Tx) error {
		ok, err := pools.Trip(b.ctx, tx, b.tenant, pools.DefaultPool, "3 failures in 1h")
		require.True(t, ok)
		return err
	}))
	_, w := b.acquire(t, b.nodes[0], "rem_0")
	require.NotNil(t, w)
	require.Equal(t, pools.WaitBreakerOpen, w.Reason)
	require.Contains(t, w.Message, "3 failures in 1h")
	var alerts int
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT count(*) FROM outbox WHERE topic = $1 AND payload->>'severity' = 'alert'`, pools.TopicBreakerTripped).Scan(&alerts))
	require.Equal(t, 1, alerts)
	require.NoError(t, pgx.BeginFunc(b.ctx, b.pool, func(tx pgx.Tx) error {
		_, err := pools.ResetBreaker(b.ctx, tx, b.tenant, pools.DefaultPool, "ops")
		return err
	}))
	_, w = b.acquire(t, b.nodes[0], "rem_0")
	require.Nil(t, w)
}

// Bad budgets are refused naming the field; a node moves between pools.
func TestBudgetValidationAndNodePool(t *testing.T) {
	b := setup(t, 1)
	for field, mut := range map[string]func(*pools.Budget){
		"maxConcurrent":        func(x *pools.Budget) { x.MaxConcurrent = -1 },
		"maxPerWindow":         func(x *pools.Budget) { x.MaxPerWindow = -1 },
		"windowSeconds":        func(x *pools.Budget) { x.Window = time.Second },
		"breakerWindowSeconds": func(x *pools.Budget) { x.BreakerWindow = 0 },
		"pool":                 func(x *pools.Budget) { x.Pool = "a/b" },
	} {
		bud := pools.Defaults(b.tenant, "gpu-a")
		mut(&bud)
		err := bud.Validate()
		require.ErrorIs(t, err, errcode.ErrInvalidInput, field)
		require.Contains(t, err.Error(), field[:4], field)
	}
	require.NoError(t, pgx.BeginFunc(b.ctx, b.pool, func(tx pgx.Tx) error {
		return pools.SetNodePool(b.ctx, tx, b.tenant, b.nodes[0], "gpu-a", "ops")
	}))
	list, err := pools.List(b.ctx, b.pool, b.tenant)
	require.NoError(t, err)
	require.Len(t, list, 1)
	require.Equal(t, "gpu-a", list[0].Pool)
	require.False(t, list[0].Configured, "the defaults")
	err = pgx.BeginFunc(b.ctx, b.pool, func(tx pgx.Tx) error {
		return pools.SetNodePool(b.ctx, tx, b.tenant, "node_missing", "gpu-a", "ops")
	})
	require.ErrorIs(t, err, errcode.ErrNotFound)
}
