package modules

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/better-compute/commands/controlplane/commands/events"
	"github.com/better-compute/commands/controlplane/commands/queue"
	"github.com/better-compute/commands/controlplane/internal/errcode"
	"github.com/better-compute/commands/controlplane/internal/store"
	"github.com/better-compute/commands/sdk/kind"
	"github.com/better-compute/commands/sdk/nodespec"
)

// Context is what a module gets from the host: the database, the command
// queue in its transactions (Commands: the module's only way to it),
// River for its own jobs, and the nodes as the control plane knows them.
type Context struct {
	name   string
	pool   *pgxpool.Pool
	queue  *queue.Queue
	jobs   *river.Client[pgx.Tx]
	logger hclog.Logger
}

// newContext builds a module's context; the host does, once per module,
// and hands it to the module's Init.
func newContext(name string, pool *pgxpool.Pool, q *queue.Queue, jobs *river.Client[pgx.Tx], logger hclog.Logger) *Context {
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	return &Context{name: name, pool: pool, queue: q, jobs: jobs, logger: logger.Named(name)}
}

// Name is the module's name.
func (c *Context) Name() string { return c.name }

// Pool is the control plane's database.
func (c *Context) Pool() *pgxpool.Pool { return c.pool }

// Logger is the module's logger.
func (c *Context) Logger() hclog.Logger { return c.logger }

// Commands is the command queue as the module uses it: queueing and
// cancelling in the caller's transaction, and reading its commands back.
// It is the module's only way to the queue.
func (c *Context) Commands() Commands { return Commands{q: c.queue, module: c.name} }

// Jobs is River, for the module's own jobs and workflow steps: InsertTx in
// the module's transaction. nil when the host runs no River.
func (c *Context) Jobs() *river.Client[pgx.Tx] { return c.jobs }

// Event publishes an event of the module in tx (the outbox: it exists
// exactly when tx commits), with the module's name in its payload.
func (c *Context) Event(ctx context.Context, tx pgx.Tx, tenantID, topic string, payload map[string]any) error {
	body := map[string]any{"module": c.name}
	for k, v := range payload {
		body[k] = v
	}
	return events.Write(ctx, tx, tenantID, topic, body)
}

// NodeView is a node as a module sees it: the desired state commands lean
// on (GPU holds and passthrough instances in the latest spec) and what the
// node last reported (conditions, GPU inventory, boot id).
type NodeView struct {
	ID, TenantID, Pool, BootID string
	// Spec is the latest spec generation (the desired state): its holds
	// and instances say which GPUs are allocated.
	Spec       nodespec.Spec
	Generation int64
	// Conditions are the node's conditions from its last NodeStatus.
	Conditions []Condition
	// Inventory is the GPU inventory the node last sent (JSON), nil when
	// none.
	Inventory json.RawMessage
	// SessionSeenAt is when a gateway last held the node's session; nil
	// when it never had one.
	SessionSeenAt *time.Time
	Deleted       bool
}

// Condition is one node condition as stored ("True"/"False" status, as the
// API shows it).
type Condition struct {
	Type    string    `json:"type"`
	Status  string    `json:"status"`
	Reason  string    `json:"reason,omitempty"`
	Message string    `json:"message,omitempty"`
	Since   time.Time `json:"since,omitzero"`
}

// True reports whether the node has condition typ with status True.
func (n NodeView) True(typ string) (Condition, bool) {
	for _, c := range n.Conditions {
		if c.Type == typ && c.Status == "True" {
			return c, true
		}
	}
	return Condition{}, false
}

// GPUInUse says whether an allocation is live on GPU uuid: a live hold
// names it (or one of its MIG instances or slots: a hold carries the
// physical GPU's uuid in all three cases), or an instance has it passed
// through. The words say which, as gpu.reset's gpu-busy refusal does.
func (n NodeView) GPUInUse(uuid string) (bool, string) {
	for _, h := range n.Spec.Holds {
		if h.GPU == uuid && h.State == nodespec.HoldLive {
			what := "the GPU"
			switch {
			case h.MIG != "":
				what = "MIG instance " + h.MIG
			case h.Slot != "":
				what = "slot " + h.Slot
			}
			return true, fmt.Sprintf("%s has a live assignment (%s, allocation %s)", uuid, what, h.Allocation)
		}
	}
	for _, in := range n.Spec.Instances {
		for _, g := range in.PassthroughGPUs {
			if g == uuid {
				return true, fmt.Sprintf("%s is passed through to %s", uuid, in.Name)
			}
		}
	}
	return false, ""
}

// Node reads node nodeID on db.
func (c *Context) Node(ctx context.Context, db store.DBTX, nodeID string) (NodeView, error) {
	return ReadNode(ctx, db, nodeID)
}

// NodeTenant is the tenant of live node nodeID, read on db: for a module's
// own API to authorize its caller on the node (auth.AuthorizeNode). An
// unknown node and a deleted one are NOT_FOUND, as the queue's GetNode
// answers the API.
func (c *Context) NodeTenant(ctx context.Context, db store.DBTX, nodeID string) (string, error) {
	n, err := c.queue.GetNode(ctx, db, "", nodeID)
	if err != nil {
		return "", err
	}
	return n.TenantID, nil
}

// ReadNode reads a node's view on db.
func ReadNode(ctx context.Context, db store.DBTX, nodeID string) (NodeView, error) {
	var (
		n       NodeView
		conds   []byte
		spec    []byte
		gen     *int64
		inv     []byte
		deleted *time.Time
	)
	err := db.QueryRow(ctx, `
		SELECT n.id, n.tenant_id, n.pool, n.boot_id, n.conditions, n.inventory, n.session_seen_at, n.deleted_at, s.generation, s.spec
		FROM nodes n
		LEFT JOIN LATERAL (SELECT generation, spec FROM node_specs WHERE node_id = n.id ORDER BY generation DESC LIMIT 1) s ON true
		WHERE n.id = $1`, nodeID).Scan(&n.ID, &n.TenantID, &n.Pool, &n.BootID, &conds, &inv, &n.SessionSeenAt, &deleted, &gen, &spec)
	if errors.Is(err, pgx.ErrNoRows) {
		return NodeView{}, &errcode.Error{Code: errcode.NotFound, Reason: "node-not-found", Message: "node " + nodeID + " not found", Details: map[string]string{"nodeId": nodeID}}
	}
	if err != nil {
		return NodeView{}, fmt.Errorf("reading node %s: %w", nodeID, err)
	}
	n.Deleted = deleted != nil
	if len(inv) > 0 && string(inv) != "null" {
		n.Inventory = inv
	}
	if len(conds) > 0 {
		if err := json.Unmarshal(conds, &n.Conditions); err != nil {
			return NodeView{}, fmt.Errorf("node %s: stored conditions: %w", nodeID, err)
		}
	}
	if gen != nil {
		n.Generation = *gen
		if n.Spec, err = nodespec.Parse(spec); err != nil {
			return NodeView{}, fmt.Errorf("node %s: spec %d: %w", nodeID, n.Generation, err)
		}
	}
	return n, nil
}

// kindsOf collects the manifests of the modules that provide kinds.
func kindsOf(ms []Module) []kind.Manifest {
	var out []kind.Manifest
	for _, m := range ms {
		if kp, ok := m.(KindProvider); ok {
			out = append(out, kp.Kinds()...)
		}
	}
	return out
}
