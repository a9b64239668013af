package remediation

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/better-compute/commands/controlplane/commands/wakes"
	"github.com/better-compute/commands/controlplane/modules"
)

// TriggerRowRemapPending is the trigger of the provision module's resets.
const TriggerRowRemapPending = "RowRemapPending"

// ProvisionName is the provision module's name (and its remediations'
// owner and id prefix).
const ProvisionName = "provision"

// ProvisionOptions tune the provision module.
type ProvisionOptions struct {
	// Engine tunes the remediations (the batch policy, deadlines, the
	// stale-session bound); StillNeeded is the module's own.
	Engine Options
	// Interval is the level-triggered pass (5s); a settled command wakes
	// its remediation at once.
	Interval time.Duration
	// Cooldown keeps a GPU whose reset just finished from being planned
	// again while the node's reported inventory catches up (5m).
	Cooldown time.Duration
}

// Provision is the provision module's remediation: gpu.reset for a GPU
// with RowRemapPending once no allocation is live on it.
type Provision struct {
	opts ProvisionOptions
	eng  *Engine
	mc   *modules.Context
}

// NewProvision returns the module.
func NewProvision(opts ProvisionOptions) *Provision {
	if opts.Interval <= 0 {
		opts.Interval = 5 * time.Second
	}
	if opts.Cooldown <= 0 {
		opts.Cooldown = 5 * time.Minute
	}
	opts.Engine.StillNeeded = RowRemapStillPending
	return &Provision{opts: opts}
}

// Name is "provision".
func (p *Provision) Name() string { return ProvisionName }

// Init builds the engine on the module's context.
func (p *Provision) Init(mc *modules.Context) error {
	p.mc = mc
	p.eng = NewEngine(ProvisionName, mc, p.opts.Engine)
	return nil
}

// Engine is the module's engine.
func (p *Provision) Engine() *Engine { return p.eng }

// Prefixes are the keys of its commands: wf:provision-….
func (p *Provision) Prefixes() []string { return []string{"wf:" + ProvisionName + "-"} }

// Wake advances the remediation whose command settled.
func (p *Provision) Wake(ctx context.Context, w wakes.Wake) error { return p.eng.Wake(ctx, w) }

// Run plans and advances until ctx ends.
func (p *Provision) Run(ctx context.Context, _ *modules.Context) error {
	t := time.NewTicker(p.opts.Interval)
	defer t.Stop()
	for {
		if err := p.Reconcile(ctx); err != nil && ctx.Err() == nil {
			p.mc.Logger().Warn("provision remediation pass failed", "error", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// planResetsSQL finds the GPUs whose reported inventory shows a pending
// row remap, leaving out nodes a reboot is planned for (it supersedes the
// reset), GPUs escalated within 7 days (escalated, not reset again) and
// GPUs whose reset finished within the cooldown ($1 seconds). PlanTx
// checks the last two again under the node's lock.
const planResetsSQL = `
SELECT n.id, n.tenant_id, n.pool, g->>'uuid'
FROM nodes n
CROSS JOIN LATERAL jsonb_array_elements(CASE WHEN jsonb_typeof(n.inventory->'gpus') = 'array' THEN n.inventory->'gpus' ELSE '[]'::jsonb END) g
WHERE n.deleted_at IS NULL AND n.inventory IS NOT NULL
  AND g->'remappedRows'->>'pending' = 'true' AND coalesce(g->>'uuid', '') <> ''
  AND NOT EXISTS (SELECT 1 FROM remediations r WHERE r.node_id = n.id AND r.action = 'node.reboot' AND r.state IN ('waiting', 'running', 'verifying'))
  AND NOT EXISTS (SELECT 1 FROM remediations r WHERE r.node_id = n.id AND r.action = 'gpu.reset' AND r.gpu = g->>'uuid'
    AND ((r.state = 'escalated' AND r.finished_at > now() - interval '7 days') OR r.finished_at > now() - $1 * interval '1 second'))
ORDER BY n.id`

// Reconcile is one level-triggered pass: plan the resets the inventories
// ask for, then advance every open one.
func (p *Provision) Reconcile(ctx context.Context) error {
	rows, err := p.mc.Pool().Query(ctx, planResetsSQL, int(p.opts.Cooldown/time.Second))
	if err != nil {
		return fmt.Errorf("finding GPUs with a pending row remap: %w", err)
	}
	var plans []Plan
	for rows.Next() {
		pl := Plan{Action: ActionGPUReset, Trigger: TriggerRowRemapPending, Cooldown: p.opts.Cooldown}
		if err := rows.Scan(&pl.NodeID, &pl.TenantID, &pl.Pool, &pl.GPU); err != nil {
			rows.Close()
			return fmt.Errorf("finding GPUs with a pending row remap: %w", err)
		}
		pl.TriggerMessage = "the inventory shows a row remap pending on " + pl.GPU + "; a GPU reset activates it"
		plans = append(plans, pl)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("finding GPUs with a pending row remap: %w", err)
	}
	for _, pl := range plans {
		if err := pgx.BeginFunc(ctx, p.mc.Pool(), func(tx pgx.Tx) error {
			_, _, err := p.eng.PlanTx(ctx, tx, pl)
			return err
		}); err != nil {
			return err
		}
	}
	return p.eng.AdvanceAll(ctx)
}

// inventoryGPU is the part of an inventory GPU the remediation reads.
type inventoryGPU struct {
	UUID         string `json:"uuid"`
	RemappedRows *struct {
		Pending bool `json:"pending"`
		Failure bool `json:"failure"`
	} `json:"remappedRows"`
}

// RowRemapStillPending says whether the node's inventory still shows a
// pending row remap on the remediation's GPU (a GPU missing from it
// counts as still pending: nothing shows it cleared).
func RowRemapStillPending(n modules.NodeView, r Row) (bool, string) {
	var inv struct {
		GPUs []inventoryGPU `json:"gpus"`
	}
	if len(n.Inventory) == 0 {
		return true, "the node reported no inventory"
	}
	if err := json.Unmarshal(n.Inventory, &inv); err != nil {
		return true, "the inventory does not parse: " + err.Error()
	}
	for _, g := range inv.GPUs {
		if g.UUID != r.GPU {
			continue
		}
		if g.RemappedRows == nil {
			return true, "the inventory reports no row-remapping state for " + r.GPU
		}
		if g.RemappedRows.Pending {
			return true, "remappedRows.pending is true on " + r.GPU
		}
		return false, "remappedRows.pending is false on " + r.GPU
	}
	return true, r.GPU + " is missing from the inventory"
}
