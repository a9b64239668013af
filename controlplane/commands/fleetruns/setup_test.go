package fleetruns_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/controlplane/commands/batches"
	"github.com/better-compute/commands/controlplane/commands/fleetruns"
	"github.com/better-compute/commands/controlplane/commands/kinds"
	"github.com/better-compute/commands/controlplane/commands/queue"
	"github.com/better-compute/commands/controlplane/fleet/labels"
	"github.com/better-compute/commands/controlplane/internal/storetest"
)

type fixture struct {
	ctx    context.Context
	pool   *pgxpool.Pool
	q      *queue.Queue
	s      *fleetruns.Service
	tenant string
	nodes  []string
	quorum batches.Quorum
}

// setup gives each test its own database, a queue with the first-party
// kinds and the fleet runs' settle hook, a tenant and n nodes.
func setup(t *testing.T, n int) *fixture {
	t.Helper()
	t.Parallel()
	return newFixture(t, n)
}

// newFixture is setup without t.Parallel, for a second tenant's database.
func newFixture(t *testing.T, n int) *fixture {
	t.Helper()
	ctx := context.Background()
	db := storetest.DB(t)
	reg, err := kinds.NewRegistry(kinds.FirstParty()...)
	require.NoError(t, err)
	q := queue.New(reg, hclog.NewNullLogger())
	f := &fixture{ctx: ctx, pool: db, q: q}
	f.s = fleetruns.New(db, q, fleetruns.Options{Quorum: func() batches.Quorum { return f.quorum }})
	q.AlsoOnSettle(fleetruns.SettleHook)
	ten, err := q.CreateTenant(ctx, db, queue.Tenant{Name: "acme"})
	require.NoError(t, err)
	f.tenant = ten.ID
	for i := range n {
		nd, err := q.CreateNode(ctx, db, queue.Node{TenantID: ten.ID, ID: fmt.Sprintf("node_%02d", i)})
		require.NoError(t, err)
		f.nodes = append(f.nodes, nd.ID)
	}
	return f
}

func (f *fixture) label(t *testing.T, node string, kv map[string]string) {
	t.Helper()
	require.NoError(t, pgx.BeginFunc(f.ctx, f.pool, func(tx pgx.Tx) error {
		_, err := labels.Set(f.ctx, tx, f.tenant, node, labels.Change{Set: kv}, "test")
		return err
	}))
}

// open returns the run's commands that are not terminal.
func (f *fixture) open(t *testing.T, runID string) []queue.Command {
	t.Helper()
	items, _, err := f.q.ListTenant(f.ctx, f.pool, queue.TenantListParams{TenantID: f.tenant, RunID: runID, Limit: 200})
	require.NoError(t, err)
	var out []queue.Command
	for _, c := range items {
		if !c.State.Terminal() {
			out = append(out, c)
		}
	}
	return out
}

func (f *fixture) settle(t *testing.T, c queue.Command, to queue.State, reason string) {
	t.Helper()
	_, changed, err := f.q.Transition(f.ctx, f.pool, queue.Transition{CommandID: c.ID, NodeID: c.NodeID, To: to, Reason: reason, Message: "test: " + reason})
	require.NoError(t, err)
	require.True(t, changed)
}

func (f *fixture) get(t *testing.T, runID string) fleetruns.Run {
	t.Helper()
	r, err := f.s.Get(f.ctx, f.tenant, runID)
	require.NoError(t, err)
	return r
}

func (f *fixture) create(t *testing.T, p fleetruns.CreateParams) fleetruns.Run {
	t.Helper()
	if p.TenantID == "" {
		p.TenantID = f.tenant
	}
	if p.Kind == "" {
		p.Kind = "diag.nvml"
	}
	if p.NotAfterSeconds == 0 {
		p.NotAfterSeconds = 600
	}
	if p.Requester == "" {
		p.Requester, p.RequestedVia = "ops", queue.ViaAPI
	}
	r, _, err := f.s.Create(f.ctx, p)
	require.NoError(t, err)
	return r
}
