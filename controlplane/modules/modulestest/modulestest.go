// Package modulestest is a module's test bench: a migrated database of the
// test's own, the kind registry and the command queue as bc-server builds
// them, the module host loading the modules under test, and the parts of
// the fleet that a module never plays itself: the API's (tenants and
// nodes) and a node's (its reports of a command, a late report that
// contradicts the stored outcome, its NodeStatus).
//
// A module reaches the command queue only through the module API
// (internal/depcheck holds that wall, its tests included); this package is
// the wall's one written exception, because something has to build the
// queue the host hands the modules and play the node's side of it. A
// module's test reads its commands through the module API
// (Bench.Commands) and plays everything else through the bench.
package modulestest

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/better-compute/commands/controlplane/commands/kinds"
	"github.com/better-compute/commands/controlplane/commands/queue"
	"github.com/better-compute/commands/controlplane/internal/storetest"
	"github.com/better-compute/commands/controlplane/modules"
	"github.com/better-compute/commands/sdk/kind"
)

// TopicReportContradicted is the event a late, contradicting report
// publishes (ReportLate), for a test that counts it in the outbox.
const TopicReportContradicted = queue.TopicReportContradicted

// Options shape a Bench.
type Options struct {
	// Kinds are registered before the modules' own: the first-party set
	// (kinds.FirstParty), a fixture, or none.
	Kinds []kind.Manifest
	// RequireBatches turns the quorum's batch rule on, as pki.approvers
	// does in bc-server: a destructive kind is refused outside a batch.
	RequireBatches bool
}

// Bench is one test's control plane for its modules.
type Bench struct {
	Ctx context.Context
	// Pool is the test's own migrated database.
	Pool *pgxpool.Pool
	// Registry holds Options.Kinds and the modules' kinds.
	Registry *kinds.Registry
	// Host has loaded the modules (their Init ran, their wakes are
	// recorded on settle); the test calls Run when it wants River.
	Host *modules.Host
	q    *queue.Queue
}

// New builds a bench over a fresh database and loads ms in its host.
func New(t testing.TB, opts Options, ms ...modules.Module) *Bench {
	t.Helper()
	pool := storetest.DB(t)
	reg, err := kinds.NewRegistry(opts.Kinds...)
	if err != nil {
		t.Fatalf("modulestest: kind registry: %v", err)
	}
	q := queue.New(reg, hclog.NewNullLogger())
	q.RequireBatches(opts.RequireBatches)
	h, err := modules.NewHost(pool, q, reg, modules.HostOptions{}, ms...)
	if err != nil {
		t.Fatalf("modulestest: loading the modules: %v", err)
	}
	return &Bench{Ctx: context.Background(), Pool: pool, Registry: reg, Host: h, q: q}
}

// Commands is the module API's Commands of the loaded module name: how the
// test reads (and, where it plays the module, queues) its commands.
func (b *Bench) Commands(t testing.TB, name string) modules.Commands {
	t.Helper()
	mc := b.Host.Context(name)
	if mc == nil {
		t.Fatalf("modulestest: module %s is not loaded", name)
	}
	return mc.Commands()
}

// Tenant creates a tenant, as the API does, and returns its id.
func (b *Bench) Tenant(t testing.TB, name string) string {
	t.Helper()
	ten, err := b.q.CreateTenant(b.Ctx, b.Pool, queue.Tenant{Name: name})
	if err != nil {
		t.Fatalf("modulestest: creating tenant %s: %v", name, err)
	}
	return ten.ID
}

// Node is a node to create.
type Node struct {
	TenantID string
	// Role is "node" when empty ("site" for a site agent).
	Role string
	// Pool is "default" when empty.
	Pool string
}

// Node creates a node, as the API does, and returns its id.
func (b *Bench) Node(t testing.TB, n Node) string {
	t.Helper()
	nd, err := b.q.CreateNode(b.Ctx, b.Pool, queue.Node{TenantID: n.TenantID, Role: n.Role, Pool: n.Pool})
	if err != nil {
		t.Fatalf("modulestest: creating a node of %s: %v", n.TenantID, err)
	}
	return nd.ID
}

// NodeStatus stores what a node's NodeStatus says, as its gateway does:
// its inventory (nil keeps the stored one) and its conditions, both JSON.
func (b *Bench) NodeStatus(t testing.TB, nodeID string, inventory, conditions json.RawMessage) {
	t.Helper()
	if err := b.q.RecordNodeStatus(b.Ctx, b.Pool, nodeID, inventory, conditions); err != nil {
		t.Fatalf("modulestest: recording the status of %s: %v", nodeID, err)
	}
}

// Report is what a node reports of one of its commands.
type Report struct {
	CommandID, NodeID string
	To                modules.State
	Reason, Message   string
	Result            json.RawMessage
}

func (r Report) transition() queue.Transition {
	return queue.Transition{CommandID: r.CommandID, NodeID: r.NodeID, To: r.To, Reason: r.Reason, Message: r.Message, Result: r.Result}
}

// Report plays the node's report r, as its gateway stores it: the command
// moves forward only (changed false otherwise), and a settle records its
// owner's wake. It returns the command as stored.
func (b *Bench) Report(t testing.TB, r Report) (modules.StoredCommand, bool) {
	t.Helper()
	c, changed, err := b.q.Transition(b.Ctx, b.Pool, r.transition())
	if err != nil {
		t.Fatalf("modulestest: reporting %s %s: %v", r.CommandID, r.To, err)
	}
	return c, changed
}

// ReportLate plays a terminal report that contradicts the stored terminal
// command cur, as the gateway stores it: beside the command (a
// modules.Contradiction), with command.report.contradicted and the owner's
// wake. It reports whether it was stored (a repeat is not).
func (b *Bench) ReportLate(t testing.TB, cur modules.StoredCommand, r Report) bool {
	t.Helper()
	recorded, err := b.q.RecordContradiction(b.Ctx, b.Pool, cur, r.transition())
	if err != nil {
		t.Fatalf("modulestest: recording the late report of %s: %v", cur.ID, err)
	}
	return recorded
}

// NodesContradictions reads, by node, the contradicting reports the nodes'
// conditions show (those of the last 7 days that no later success of the
// same kind answered), as the API's node view does.
func (b *Bench) NodesContradictions(t testing.TB, nodeIDs ...string) map[string][]modules.Contradiction {
	t.Helper()
	xs, err := queue.NodesContradictions(b.Ctx, b.Pool, nodeIDs)
	if err != nil {
		t.Fatalf("modulestest: reading the nodes' contradicting reports: %v", err)
	}
	return xs
}

// SecretRefsOf are the secret refs in c's signed command bytes (what the
// node may fetch), nil for none.
func SecretRefsOf(c modules.StoredCommand) []string { return queue.SecretRefsOf(c) }
