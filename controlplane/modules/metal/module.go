package metal

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/better-compute/commands/controlplane/commands/batches"
	"github.com/better-compute/commands/controlplane/commands/wakes"
	"github.com/better-compute/commands/controlplane/modules"
	"github.com/better-compute/commands/sdk/kind"
)

// Module is the metal module as the module host loads it: it registers
// the metal kinds and is woken, durably, when one of its runs' commands
// settles, to queue that machine's next step (metal.bulk runs a sequence
// per machine: boot from PXE, then cycle).
type Module struct {
	mc *modules.Context
}

var (
	_ modules.KindProvider = (*Module)(nil)
	_ modules.Waker        = (*Module)(nil)
	_ modules.Initializer  = (*Module)(nil)
)

// Name is the module's name.
func (*Module) Name() string { return "metal" }

// Kinds are the module's kinds.
func (*Module) Kinds() []kind.Manifest { return Manifests() }

// Prefixes are the keys the module owns: its runs' steps.
func (*Module) Prefixes() []string { return []string{"wf:" + string(RunPrefix)} }

// Init keeps the module's context: its wakes reach the database and the
// command queue through it.
func (m *Module) Init(mc *modules.Context) error {
	m.mc = mc
	return nil
}

// Wake advances the run whose step settled: when it succeeded, the
// machine's next step is queued in the run's batch; when it did not, the
// machine's later steps are skipped, saying why. It is idempotent (a wake
// comes at least once): the run row is locked, and a step already queued
// or skipped is left as it is.
func (m *Module) Wake(ctx context.Context, w wakes.Wake) error {
	rest, ok := strings.CutPrefix(w.Key, "wf:")
	if !ok {
		return nil
	}
	runID, stepID, ok := strings.Cut(rest, ":")
	if !ok {
		return nil
	}
	return pgx.BeginFunc(ctx, m.mc.Pool(), func(tx pgx.Tx) error {
		r, err := getBy(ctx, tx, `id = $1 FOR UPDATE`, runID)
		if err != nil {
			return fmt.Errorf("metal run %s: %w", runID, err)
		}
		at := -1
		for i, s := range r.Steps {
			if s.StepID() == stepID {
				at = i
			}
		}
		if at < 0 {
			return nil
		}
		done := r.Steps[at]
		next := -1
		for i, s := range r.Steps {
			if s.Machine == done.Machine && s.Seq == done.Seq+1 {
				next = i
			}
		}
		if next < 0 || r.Steps[next].CommandID != "" || r.Steps[next].Skipped != "" {
			return nil
		}
		if w.State != string(modules.StateSucceeded) {
			for i := range r.Steps {
				if r.Steps[i].Machine == done.Machine && r.Steps[i].Seq > done.Seq {
					r.Steps[i].Skipped = fmt.Sprintf("step %d (%s) ended %s %s", done.Seq, done.Kind, w.State, w.Reason)
				}
			}
		} else {
			b, err := batches.Get(ctx, tx, r.TenantID, r.BatchID)
			if err != nil {
				return fmt.Errorf("metal run %s: reading its batch: %w", r.ID, err)
			}
			cmd, err := enqueueStep(ctx, tx, m.mc.Commands(), r, b, r.Steps[next])
			if err != nil {
				// The step cannot be queued (its batch expired, the site
				// node was deleted): skip the rest and say why, rather
				// than retry forever.
				for i := range r.Steps {
					if r.Steps[i].Machine == done.Machine && r.Steps[i].Seq > done.Seq {
						r.Steps[i].Skipped = "could not queue step " + fmt.Sprint(r.Steps[next].Seq) + ": " + err.Error()
					}
				}
			} else {
				r.Steps[next].CommandID = cmd.ID
			}
		}
		steps, err := json.Marshal(r.Steps)
		if err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `UPDATE metal_runs SET steps = $2 WHERE id = $1`, r.ID, steps)
		return err
	})
}
