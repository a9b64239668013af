package metal

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/better-compute/commands/controlplane/commands/batches"
	"github.com/better-compute/commands/controlplane/internal/errcode"
	"github.com/better-compute/commands/controlplane/internal/ids"
	"github.com/better-compute/commands/controlplane/internal/store"
	"github.com/better-compute/commands/controlplane/modules"
	"github.com/better-compute/commands/internal/trust"
	bmc "github.com/better-compute/commands/plugins/bmc/manifest"
)

// The workflows.
const (
	WorkflowPower = "metal.power"
	WorkflowBulk  = "metal.bulk"
)

// RunPrefix starts every run id.
const RunPrefix ids.Prefix = "mrun_"

// MaxMachines bounds one run.
const MaxMachines = 1000

// Run states, derived from the batch and the commands.
const (
	StateAwaitingApproval = "awaiting-approval"
	StateRunning          = "running"
	StateSucceeded        = "succeeded"
	StateFailed           = "failed"
)

// The states of a step that has no command (yet).
const (
	// StepWaiting is a later step waiting for the one before it.
	StepWaiting = "waiting"
	// StepSkipped is a later step never queued: the one before failed.
	StepSkipped = "skipped"
)

var machinePattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$`)

// Step is one machine's action in a run.
type Step struct {
	// Machine is the BMC's id in the site agent's inventory.
	Machine string `json:"machine"`
	// Kind is bmc.power or bmc.boot.
	Kind string `json:"kind"`
	// Payload is the command's payload; it names Machine as its bmc.
	Payload json.RawMessage `json:"payload"`
	// Seq is the step's place in its machine's sequence, from 1: a run
	// queues each machine's first step at once and the next when the one
	// before succeeded.
	Seq int `json:"seq"`
	// CommandID is the step's command, once queued.
	CommandID string `json:"commandId,omitempty"`
	// Skipped says why a later step was never queued (the step before it
	// did not succeed).
	Skipped string `json:"skipped,omitempty"`
}

// StepID is the step's id in its key, wf:<runId>:<machine>.<seq>.
func (s Step) StepID() string { return s.Machine + "." + strconv.Itoa(s.Seq) }

// MaxStepsPerMachine bounds one machine's sequence.
const MaxStepsPerMachine = 8

// StartParams describe a run.
type StartParams struct {
	TenantID, Requester, IdempotencyKey string
	// Workflow is metal.power or metal.bulk.
	Workflow string
	// SiteNodeID is the site agent that reaches the machines' BMCs.
	SiteNodeID string
	// Reason is what approvers read.
	Reason string
	Steps  []Step
	// Deadline bounds the batch's approval and each command's not_after
	// (batches.DefaultDeadline when zero).
	Deadline time.Duration
	// SecretRefs name tenant secrets every command may fetch: the BMC
	// credentials, as the site inventory's credentialRef names them.
	SecretRefs []string
}

// Run is one workflow run.
type Run struct {
	ID, TenantID, Requester, Workflow, SiteNodeID, BatchID, Reason string
	Steps                                                          []Step
	// SecretRefs go with every step's command (names, never values).
	SecretRefs []string
	CreatedAt  time.Time
}

func invalid(field, format string, args ...any) error {
	return &errcode.Error{Code: errcode.InvalidInput, Reason: "invalid-" + field, Message: fmt.Sprintf(format, args...), Details: map[string]string{"field": field}}
}

// PowerSteps are metal.power's steps: action on every machine.
func PowerSteps(machines []string, action string) ([]Step, error) {
	ok := false
	for _, a := range bmc.PowerActions {
		ok = ok || a == action
	}
	if !ok {
		return nil, invalid("action", "action %q: must be one of on, off, soft, cycle, reset", action)
	}
	steps := make([]Step, 0, len(machines))
	for _, m := range machines {
		p, _ := json.Marshal(map[string]string{"bmc": m, "action": action})
		steps = append(steps, Step{Machine: m, Kind: bmc.PowerKind, Payload: p})
	}
	return steps, nil
}

// BulkStep is metal.bulk's step before it is checked: one power or boot
// action on one machine, its payload without the bmc, which the step's
// machine fills in.
func BulkStep(machine, k string, payload json.RawMessage) (Step, error) {
	if k != bmc.PowerKind && k != bmc.BootKind {
		return Step{}, invalid("steps", "machine %s: kind %q: metal.bulk runs bmc.power and bmc.boot", machine, k)
	}
	var p map[string]any
	if len(payload) > 0 {
		if err := json.Unmarshal(payload, &p); err != nil || p == nil {
			return Step{}, invalid("steps", "machine %s: payload must be a JSON object", machine)
		}
	}
	if p == nil {
		p = map[string]any{}
	}
	if b, set := p["bmc"]; set && b != machine {
		return Step{}, invalid("steps", "machine %s: payload names bmc %v; leave it out, the step's machine is the BMC", machine, b)
	}
	p["bmc"] = machine
	b, _ := json.Marshal(p)
	return Step{Machine: machine, Kind: k, Payload: b}, nil
}

// Start records a run in tx: it creates the run's own batch, whose scope
// has one leaf per machine (the site agent, the kind, and the SHA-256 of
// the exact payload that names the machine's BMC, so an approval covers
// that action on that machine and nothing else), queues one command per
// machine on the site agent in the batch, and stores the run. With the
// quorum on the commands are held until the batch is approved; without,
// the batch is recorded for audit and they go at once. A repeat of the
// caller's idempotency key returns the first run.
func Start(ctx context.Context, tx pgx.Tx, cmds modules.Commands, quorum batches.Quorum, p StartParams, now time.Time) (Run, bool, error) {
	if p.Workflow != WorkflowPower && p.Workflow != WorkflowBulk {
		return Run{}, false, invalid("workflow", "workflow %q: must be metal.power or metal.bulk", p.Workflow)
	}
	if p.IdempotencyKey != "" {
		r, err := getBy(ctx, tx, `tenant_id = $1 AND requester = $2 AND idempotency_key = $3`, p.TenantID, p.Requester, p.IdempotencyKey)
		if err == nil {
			if r.Workflow != p.Workflow {
				return Run{}, false, &errcode.Error{Code: errcode.Conflict, Reason: "idempotency-key-reused",
					Message: fmt.Sprintf("idempotency key already names run %s of %s", r.ID, r.Workflow), Details: map[string]string{"runId": r.ID}}
			}
			return r, true, nil
		}
		if !errors.Is(err, errNoRun) {
			return Run{}, false, err
		}
	}
	if len(p.Steps) == 0 || len(p.Steps) > MaxMachines {
		return Run{}, false, invalid("machines", "a run needs 1 to %d machines, has %d", MaxMachines, len(p.Steps))
	}
	seen := map[string]int{}
	for i := range p.Steps {
		s := &p.Steps[i]
		if !machinePattern.MatchString(s.Machine) {
			return Run{}, false, invalid("machines", "machine %q: must be a BMC id of the site inventory (letters, digits, dots, dashes, underscores)", s.Machine)
		}
		seen[s.Machine]++
		s.Seq = seen[s.Machine]
		if p.Workflow == WorkflowPower && s.Seq > 1 {
			return Run{}, false, invalid("machines", "machine %s is listed twice: metal.power does one action per machine (metal.bulk runs a sequence per machine)", s.Machine)
		}
		if s.Seq > MaxStepsPerMachine {
			return Run{}, false, invalid("steps", "machine %s has more than %d steps", s.Machine, MaxStepsPerMachine)
		}
	}
	if p.Deadline == 0 {
		p.Deadline = batches.DefaultDeadline
	}
	r := Run{ID: ids.New(RunPrefix), TenantID: p.TenantID, Requester: p.Requester, Workflow: p.Workflow, SiteNodeID: p.SiteNodeID, Reason: p.Reason, SecretRefs: p.SecretRefs}
	scope := make([]batches.Leaf, 0, len(p.Steps))
	for _, s := range p.Steps {
		scope = append(scope, batches.Leaf{Subject: p.SiteNodeID, Kind: s.Kind, PayloadSHA256: hex.EncodeToString(trust.PayloadDigest(s.Payload))})
	}
	b, _, err := batches.Create(ctx, tx, quorum, batches.CreateParams{TenantID: p.TenantID, Requester: p.Requester,
		Reason: fmt.Sprintf("%s (%s run %s, %d machines)", p.Reason, p.Workflow, r.ID, len(p.Steps)), Scope: scope, Deadline: p.Deadline}, now)
	if err != nil {
		return Run{}, false, err
	}
	r.BatchID = b.ID
	for _, s := range p.Steps {
		// Every step is checked now (its kind, payload and the site node's
		// role), so that a run that cannot finish is refused whole; only
		// each machine's first step is queued.
		if err := cmds.Check(modules.Command{TenantID: p.TenantID, NodeID: p.SiteNodeID, Kind: s.Kind, Payload: s.Payload, BatchID: b.ID}); err != nil {
			return Run{}, false, fmt.Errorf("machine %s: %w", s.Machine, err)
		}
		if s.Seq == 1 {
			cmd, err := enqueueStep(ctx, tx, cmds, r, b, s)
			if err != nil {
				return Run{}, false, err
			}
			s.CommandID = cmd.ID
		}
		r.Steps = append(r.Steps, s)
	}
	steps, err := json.Marshal(r.Steps)
	if err != nil {
		return Run{}, false, fmt.Errorf("encoding the steps: %w", err)
	}
	err = tx.QueryRow(ctx, `INSERT INTO metal_runs (id, tenant_id, requester, idempotency_key, workflow, site_node_id, batch_id, reason, steps, secret_refs)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) RETURNING created_at`,
		r.ID, r.TenantID, r.Requester, p.IdempotencyKey, r.Workflow, r.SiteNodeID, r.BatchID, r.Reason, steps, nonNil(r.SecretRefs)).Scan(&r.CreatedAt)
	if err != nil {
		return Run{}, false, fmt.Errorf("storing run: %w", err)
	}
	return r, false, nil
}

// enqueueStep queues step s of run r in batch b.
func enqueueStep(ctx context.Context, tx pgx.Tx, cmds modules.Commands, r Run, b batches.Batch, s Step) (modules.StoredCommand, error) {
	// The metal run's requester asked for each of its steps; the module
	// queued them (requestedVia module:metal).
	cmd, _, err := cmds.EnqueueFor(ctx, tx, r.Requester, modules.Command{
		TenantID: r.TenantID, NodeID: r.SiteNodeID, Kind: s.Kind, Payload: s.Payload,
		IdempotencyKey: modules.StepKey(r.ID, s.StepID(), 1), NotAfter: b.Deadline,
		BatchID: b.ID, AwaitingApproval: b.State == batches.StateAwaiting, SecretRefs: r.SecretRefs,
	})
	if err != nil {
		return modules.StoredCommand{}, fmt.Errorf("machine %s: %w", s.Machine, err)
	}
	return cmd, nil
}

var errNoRun = errors.New("no such run")

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// NotFound is the API's answer for a run the tenant cannot see.
func NotFound(id string) error {
	return &errcode.Error{Code: errcode.NotFound, Reason: "run-not-found", Message: "metal run " + id + " not found", Details: map[string]string{"runId": id}}
}

func getBy(ctx context.Context, db store.DBTX, where string, args ...any) (Run, error) {
	var r Run
	var steps []byte
	err := db.QueryRow(ctx, `SELECT id, tenant_id, requester, workflow, site_node_id, batch_id, reason, steps, secret_refs, created_at FROM metal_runs WHERE `+where, args...).
		Scan(&r.ID, &r.TenantID, &r.Requester, &r.Workflow, &r.SiteNodeID, &r.BatchID, &r.Reason, &steps, &r.SecretRefs, &r.CreatedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return Run{}, errNoRun
	}
	if err != nil {
		return Run{}, fmt.Errorf("reading run: %w", err)
	}
	if err := json.Unmarshal(steps, &r.Steps); err != nil {
		return Run{}, fmt.Errorf("run %s: decoding its steps: %w", r.ID, err)
	}
	return r, nil
}

// Machine is one machine's part of a report.
type Machine struct {
	Machine string
	// Seq is the step's place in the machine's sequence, from 1.
	Seq             int
	Kind, CommandID string
	// State is the command's state; Reason and Message say why it ended or
	// waits.
	State, Reason, Message string
	AwaitingApproval       bool
	// Result is the bmc kind's result (what the BMC last said, which
	// provider worked, whether a later read agreed).
	Result json.RawMessage
}

// Report is a run with its batch and each machine's command.
type Report struct {
	Run
	BatchState      string
	ApprovalsNeeded int
	State           string
	Machines        []Machine
}

// Get reports a run of the tenant's.
func Get(ctx context.Context, db store.DBTX, cmds modules.Commands, tenantID, runID string) (Report, error) {
	r, err := getBy(ctx, db, `tenant_id = $1 AND id = $2`, tenantID, runID)
	if errors.Is(err, errNoRun) {
		return Report{}, NotFound(runID)
	}
	if err != nil {
		return Report{}, err
	}
	b, err := batches.Get(ctx, db, tenantID, r.BatchID)
	if err != nil {
		return Report{}, fmt.Errorf("run %s: reading its batch: %w", r.ID, err)
	}
	rep := Report{Run: r, BatchState: b.State, ApprovalsNeeded: b.Needed()}
	counts := map[modules.State]int{}
	ended := 0
	for _, s := range r.Steps {
		m := Machine{Machine: s.Machine, Seq: s.Seq, Kind: s.Kind}
		switch {
		case s.CommandID != "":
			c, err := cmds.Get(ctx, db, r.SiteNodeID, s.CommandID)
			if err != nil {
				return Report{}, fmt.Errorf("run %s: machine %s: %w", r.ID, s.Machine, err)
			}
			m.CommandID, m.State, m.Reason, m.Message, m.AwaitingApproval, m.Result = c.ID, string(c.State), c.Reason, c.Message, c.AwaitingApproval, c.Result
			if m.Message == "" && c.WaitingMessage != "" {
				m.Reason, m.Message = c.WaitingReason, c.WaitingMessage
			}
			counts[c.State]++
			if c.State.Terminal() {
				ended++
			}
		case s.Skipped != "":
			m.State, m.Reason, m.Message = StepSkipped, "previous-step-failed", s.Skipped
			ended++
		default:
			m.State, m.Message = StepWaiting, fmt.Sprintf("queued once step %d of %s succeeds", s.Seq-1, s.Machine)
		}
		rep.Machines = append(rep.Machines, m)
	}
	sort.SliceStable(rep.Machines, func(i, j int) bool {
		if rep.Machines[i].Machine != rep.Machines[j].Machine {
			return rep.Machines[i].Machine < rep.Machines[j].Machine
		}
		return rep.Machines[i].Seq < rep.Machines[j].Seq
	})
	switch {
	case counts[modules.StateSucceeded] == len(r.Steps):
		rep.State = StateSucceeded
	case ended == len(r.Steps):
		rep.State = StateFailed
	case b.State == batches.StateAwaiting:
		rep.State = StateAwaitingApproval
	default:
		rep.State = StateRunning
	}
	return rep, nil
}
