package reconciler

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/better-compute/commands/controlplane/commands/wakes"
	"github.com/better-compute/commands/controlplane/modules"
	"github.com/better-compute/commands/controlplane/modules/remediation"
)

// Name is the health module's name: its remediations' owner and id prefix.
const Name = "health"

// Options tune the reconciler.
type Options struct {
	// Engine tunes the remediations; StillNeeded is the reconciler's own.
	Engine remediation.Options
	// Interval is the level-triggered pass (5s).
	Interval time.Duration
	// Cooldown keeps a node whose remediation just finished (or failed)
	// from being planned again at once (5m).
	Cooldown time.Duration
}

// Reconciler is the health module.
type Reconciler struct {
	opts Options
	eng  *remediation.Engine
	mc   *modules.Context
}

// New returns the module.
func New(opts Options) *Reconciler {
	if opts.Interval <= 0 {
		opts.Interval = 5 * time.Second
	}
	if opts.Cooldown <= 0 {
		opts.Cooldown = 5 * time.Minute
	}
	opts.Engine.StillNeeded = StillNeeded
	return &Reconciler{opts: opts}
}

// Name is "health".
func (r *Reconciler) Name() string { return Name }

// Init builds the engine.
func (r *Reconciler) Init(mc *modules.Context) error {
	r.mc = mc
	r.eng = remediation.NewEngine(Name, mc, r.opts.Engine)
	return nil
}

// Engine is the reconciler's engine.
func (r *Reconciler) Engine() *remediation.Engine { return r.eng }

// Prefixes are the keys of its commands: wf:health-….
func (r *Reconciler) Prefixes() []string { return []string{"wf:" + Name + "-"} }

// Wake advances the remediation whose command settled.
func (r *Reconciler) Wake(ctx context.Context, w wakes.Wake) error { return r.eng.Wake(ctx, w) }

// Run reconciles every Interval until ctx ends.
func (r *Reconciler) Run(ctx context.Context, _ *modules.Context) error {
	t := time.NewTicker(r.opts.Interval)
	defer t.Stop()
	for {
		if err := r.Reconcile(ctx); err != nil && ctx.Err() == nil {
			r.mc.Logger().Warn("health reconciler pass failed", "error", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// candidatesSQL lists the nodes any rule may match: a True RebootRequired
// or an XID condition in the inventory; stale sessions are skipped here
// ($1 seconds) and again by the engine before any work.
const candidatesSQL = `
SELECT id FROM nodes
WHERE deleted_at IS NULL AND session_seen_at > now() - $1 * interval '1 second'
  AND (conditions @> '[{"type":"RebootRequired","status":"True"}]'
    OR jsonb_path_exists(inventory, '$.gpus[*].xids[*]') OR jsonb_path_exists(inventory, '$.unmatchedXids[*]'))
ORDER BY id`

// Reconcile is one level-triggered pass: evaluate the table on every
// candidate node, plan what it asks for (superseding a node's waiting
// resets when it needs a reboot), then advance every open remediation.
func (r *Reconciler) Reconcile(ctx context.Context) error {
	stale := r.opts.Engine.StaleAfter
	if stale <= 0 {
		stale = 90 * time.Second
	}
	rows, err := r.mc.Pool().Query(ctx, candidatesSQL, int(stale/time.Second))
	if err != nil {
		return fmt.Errorf("listing candidate nodes: %w", err)
	}
	nodes, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return fmt.Errorf("listing candidate nodes: %w", err)
	}
	var errs []error
	for _, id := range nodes {
		if err := pgx.BeginFunc(ctx, r.mc.Pool(), func(tx pgx.Tx) error { return r.planNode(ctx, tx, id) }); err != nil {
			errs = append(errs, err)
		}
	}
	errs = append(errs, r.eng.AdvanceAll(ctx))
	return errors.Join(errs...)
}

func (r *Reconciler) planNode(ctx context.Context, tx pgx.Tx, nodeID string) error {
	n, err := modules.ReadNode(ctx, tx, nodeID)
	if err != nil {
		return err
	}
	for _, f := range Evaluate(n) {
		id, created, err := r.eng.PlanTx(ctx, tx, remediation.Plan{NodeID: nodeID, TenantID: n.TenantID, Pool: n.Pool, Action: f.Action, GPU: f.GPU,
			Trigger: f.Trigger, TriggerMessage: f.Message, Cooldown: r.opts.Cooldown})
		if err != nil {
			return err
		}
		if created && f.Action == remediation.ActionNodeReboot {
			if _, err := r.eng.Supersede(ctx, tx, nodeID, remediation.ActionGPUReset, id); err != nil {
				return err
			}
		}
	}
	return nil
}
