package rollout_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/controlplane/commands/wakes"
	"github.com/better-compute/commands/controlplane/fleet/pools"
	"github.com/better-compute/commands/controlplane/modules"
	"github.com/better-compute/commands/controlplane/modules/modulestest"
	"github.com/better-compute/commands/controlplane/modules/rollout"
	"github.com/better-compute/commands/internal/upgrade"
)

const poolName = "gpu-a"

type fleet struct {
	ctx    context.Context
	pool   *pgxpool.Pool
	bench  *modulestest.Bench
	cmds   modules.Commands
	m      *rollout.Module
	tenant string
	nodes  []string
}

// newFleet is n simulated nodes at version from in one pool with budget
// maxConcurrent, and the rollout module over a real database.
func newFleet(t *testing.T, n, maxConcurrent int, from string) *fleet {
	t.Helper()
	m := rollout.New(nil)
	// The module registers daemon.upgrade itself, through the module host.
	b := modulestest.New(t, modulestest.Options{}, m)
	ctx, db := b.Ctx, b.Pool
	_, ok := b.Registry.Get(upgrade.KindName)
	require.True(t, ok, "the rollout module registers daemon.upgrade")
	ten := b.Tenant(t, "acme")
	f := &fleet{ctx: ctx, pool: db, bench: b, cmds: b.Commands(t, rollout.Name), m: m, tenant: ten}
	for i := 0; i < n; i++ {
		id := b.Node(t, modulestest.Node{TenantID: ten})
		f.nodes = append(f.nodes, id)
		_, err := db.Exec(ctx, `UPDATE nodes SET pool = $2, daemon_version = $3 WHERE id = $1`, id, poolName, from)
		require.NoError(t, err)
	}
	require.NoError(t, pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		bu := pools.Defaults(ten, poolName)
		bu.MaxConcurrent = maxConcurrent
		_, err := pools.Set(ctx, tx, bu, "test")
		return err
	}))
	return f
}

func (f *fleet) set(t *testing.T, version string) rollout.Rollout {
	t.Helper()
	var r rollout.Rollout
	require.NoError(t, pgx.BeginFunc(f.ctx, f.pool, func(tx pgx.Tx) error {
		var err error
		r, err = rollout.Set(f.ctx, tx, rollout.Desired{TenantID: f.tenant, Pool: poolName, Version: version,
			PackageURL: "https://releases.example/bcd-" + version + ".tar.gz", PackageSize: 1234, PackageSHA256: strings.Repeat("ab", 32),
			Release: []byte(`{"body":"e30=","signatures":[{"keyId":"k","sig":"AAAA"}]}`)}, "test")
		return err
	}))
	return r
}

// inFlight are the pool's daemon.upgrade commands that are not terminal.
func (f *fleet) inFlight(t *testing.T) []modules.StoredCommand {
	t.Helper()
	var out []modules.StoredCommand
	for _, id := range f.nodes {
		list, _, err := f.cmds.List(f.ctx, f.pool, modules.ListParams{NodeID: id, Limit: 100})
		require.NoError(t, err)
		for _, c := range list {
			if c.Kind == upgrade.KindName && !c.State.Terminal() {
				out = append(out, c)
			}
		}
	}
	return out
}

// settle reports c's outcome as the node would, moves the node's version
// when it succeeded, and delivers the owner's wake to the module.
func (f *fleet) settle(t *testing.T, c modules.StoredCommand, to modules.State, reason, version string) {
	t.Helper()
	f.bench.Report(t, modulestest.Report{CommandID: c.ID, NodeID: c.NodeID, To: modules.StateRunning})
	_, changed := f.bench.Report(t, modulestest.Report{CommandID: c.ID, NodeID: c.NodeID, To: to, Reason: reason})
	require.True(t, changed)
	if version != "" {
		_, err := f.pool.Exec(f.ctx, `UPDATE nodes SET daemon_version = $2 WHERE id = $1`, c.NodeID, version)
		require.NoError(t, err)
	}
	require.NoError(t, f.m.Wake(f.ctx, wakes.Wake{Owner: rollout.KeyPrefix, Args: wakes.Args{Key: c.IdempotencyKey, CommandID: c.ID,
		NodeID: c.NodeID, CommandKind: c.Kind, State: string(to), Reason: reason}, Attempt: 1}))
}

// "A rollout of 10 simulated nodes in a pool with budget 2 never has more
// than 2 upgrading at once and pauses on the first rollback."
func TestRollout_TenNodesBudgetTwo_PausesOnFirstRollback(t *testing.T) {
	f := newFleet(t, 10, 2, "1.0.0")
	f.set(t, "1.1.0")
	n, err := f.m.Reconcile(f.ctx, f.tenant, poolName)
	require.NoError(t, err)
	require.Equal(t, 2, n, "the first wave fills the budget")
	n, err = f.m.Reconcile(f.ctx, f.tenant, poolName)
	require.NoError(t, err)
	require.Zero(t, n, "a second pass starts nothing while the budget is used")

	rolledBack := ""
	settled := 0
	for {
		fl := f.inFlight(t)
		require.LessOrEqual(t, len(fl), 2, "never more than the budget upgrading at once")
		locks, err := pools.ListLocks(f.ctx, f.pool, f.tenant, poolName)
		require.NoError(t, err)
		require.LessOrEqual(t, len(locks), 2)
		if len(fl) == 0 {
			break
		}
		c := fl[0]
		if settled == 5 {
			rolledBack = c.NodeID
			f.settle(t, c, modules.StateFailed, upgrade.ReasonRolledBack, "")
		} else {
			f.settle(t, c, modules.StateSucceeded, "", "1.1.0")
		}
		settled++
	}
	require.NotEmpty(t, rolledBack)
	r, err := rollout.Get(f.ctx, f.pool, f.tenant, poolName)
	require.NoError(t, err)
	require.True(t, r.Paused, "the first rollback pauses the rollout")
	require.Contains(t, r.PausedReason, rolledBack)

	st, err := rollout.Status(f.ctx, f.pool, f.tenant, poolName)
	require.NoError(t, err)
	counts := map[string]int{}
	for _, nd := range st.Nodes {
		counts[nd.State]++
		require.Equal(t, "1.1.0", nd.Target)
		if nd.NodeID == rolledBack {
			require.Equal(t, rollout.StateRolledBack, nd.State)
			require.Equal(t, "1.0.0", nd.Current)
		}
	}
	require.Equal(t, 1, counts[rollout.StateRolledBack])
	require.Equal(t, 10, counts[rollout.StateUpgraded]+counts[rollout.StateRolledBack]+counts[rollout.StatePending])
	require.Less(t, counts[rollout.StateUpgraded], 9, "the wave stopped: not every node was upgraded")
	n, err = f.m.Reconcile(f.ctx, f.tenant, poolName)
	require.NoError(t, err)
	require.Zero(t, n, "a paused rollout starts nothing")

	// resume: the rest are upgraded, the rolled-back node is not retried.
	require.NoError(t, pgx.BeginFunc(f.ctx, f.pool, func(tx pgx.Tx) error {
		_, err := rollout.Resume(f.ctx, tx, f.tenant, poolName, "test")
		return err
	}))
	_, err = f.m.Reconcile(f.ctx, f.tenant, poolName)
	require.NoError(t, err)
	for {
		fl := f.inFlight(t)
		require.LessOrEqual(t, len(fl), 2)
		if len(fl) == 0 {
			break
		}
		require.NotEqual(t, rolledBack, fl[0].NodeID, "a rolled-back node is not retried in the generation")
		f.settle(t, fl[0], modules.StateSucceeded, "", "1.1.0")
	}
	st, err = rollout.Status(f.ctx, f.pool, f.tenant, poolName)
	require.NoError(t, err)
	up := 0
	for _, nd := range st.Nodes {
		if nd.State == rollout.StateUpgraded {
			up++
		}
	}
	require.Equal(t, 9, up)
}

// A wake delivered twice changes nothing more (wakes come at least once).
func TestRollout_WakeIsIdempotent(t *testing.T) {
	f := newFleet(t, 3, 1, "1.0.0")
	f.set(t, "1.1.0")
	_, err := f.m.Reconcile(f.ctx, f.tenant, poolName)
	require.NoError(t, err)
	fl := f.inFlight(t)
	require.Len(t, fl, 1)
	f.settle(t, fl[0], modules.StateSucceeded, "", "1.1.0")
	next := f.inFlight(t)
	require.Len(t, next, 1)
	require.NoError(t, f.m.Wake(f.ctx, wakes.Wake{Args: wakes.Args{Key: fl[0].IdempotencyKey, CommandID: fl[0].ID, NodeID: fl[0].NodeID, State: "succeeded"}, Attempt: 2}))
	require.Len(t, f.inFlight(t), 1, "the repeat started nothing")
}

func TestDesired_ValidateNamesTheField(t *testing.T) {
	ok := rollout.Desired{TenantID: "tenant_1", Pool: "p", Version: "1.1.0", PackageURL: "https://x/y", PackageSize: 1, PackageSHA256: strings.Repeat("a", 64), Release: []byte("x")}
	require.NoError(t, ok.Validate())
	for field, edit := range map[string]func(*rollout.Desired){
		"version":       func(d *rollout.Desired) { d.Version = "../x" },
		"packageUrl":    func(d *rollout.Desired) { d.PackageURL = "ftp://x" },
		"packageSize":   func(d *rollout.Desired) { d.PackageSize = 0 },
		"packageSha256": func(d *rollout.Desired) { d.PackageSHA256 = "ABC" },
		"release":       func(d *rollout.Desired) { d.Release = nil },
	} {
		d := ok
		edit(&d)
		err := d.Validate()
		require.Error(t, err, field)
		require.Contains(t, fmt.Sprint(err), field)
	}
	_ = time.Second
}
