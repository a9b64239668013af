package modules_test

import (
	"context"
	"encoding/json"
	"os"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/controlplane/commands/kinds"
	"github.com/better-compute/commands/controlplane/commands/queue"
	"github.com/better-compute/commands/controlplane/internal/storetest"
	"github.com/better-compute/commands/sdk/kind"
)

// stepKind is this package's fixture kind.
var stepKind = kind.Manifest{
	Kind: "test.step", Lane: kind.LaneControl, Timeout: kind.Duration(time.Minute),
	Roles: []string{"node"}, Flags: kind.Flags{RetrySafe: true}, Version: "1.0.0",
}

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) != "" {
		os.Exit(settleHelper())
	}
	os.Exit(m.Run())
}

type bundle struct {
	ctx    context.Context
	pool   *pgxpool.Pool
	q      *queue.Queue
	reg    *kinds.Registry
	tenant string
	node   string
	dbName string
}

func setup(t *testing.T) *bundle {
	t.Helper()
	t.Parallel()
	ctx := context.Background()
	pool := storetest.DB(t)
	var name string
	require.NoError(t, pool.QueryRow(ctx, `SELECT current_database()`).Scan(&name))
	reg, err := kinds.NewRegistry(stepKind)
	require.NoError(t, err)
	q := queue.New(reg, hclog.NewNullLogger())
	ten, err := q.CreateTenant(ctx, pool, queue.Tenant{Name: "acme"})
	require.NoError(t, err)
	n, err := q.CreateNode(ctx, pool, queue.Node{TenantID: ten.ID})
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `CREATE TABLE module_steps (workflow_id text, step text, command_id text)`)
	require.NoError(t, err)
	return &bundle{ctx: ctx, pool: pool, q: q, reg: reg, tenant: ten.ID, node: n.ID, dbName: name}
}

func (b *bundle) step(key string) queue.EnqueueParams {
	return queue.EnqueueParams{NodeID: b.node, Kind: stepKind.Kind, Payload: json.RawMessage(`{}`), IdempotencyKey: key}
}

// settle moves a command through dispatch to succeeded, as a node's report
// would, on db (a pool: the queue opens the settling transaction itself).
func settle(t *testing.T, ctx context.Context, q *queue.Queue, db *pgxpool.Pool, id string) {
	t.Helper()
	_, changed, err := q.Transition(ctx, db, queue.Transition{CommandID: id, To: queue.Succeeded})
	require.NoError(t, err)
	require.True(t, changed)
}
