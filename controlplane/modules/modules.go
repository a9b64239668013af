// Package modules is the module API of the control plane: Go code that
// registers its kinds, queues commands through the command queue in its own
// transactions, and is woken, durably, when a command it owns settles.
//
// "Modules queue any registered kind through the command queue,
// ctx.commands.enqueue(tx, command), in their own transaction" and cancel
// with ctx.commands.cancel(tx, commandId): Context.Commands() runs both in
// the caller's pgx transaction, so a command and the module's own rows
// commit or roll back together. A module's keys are its own:
// wf:<workflowId>:<stepId> for a workflow step (StepKey appends the attempt
// of a deliberate retry, which would otherwise return the first command)
// and acceptance:<nodeId>:<attempt>:<kind> for acceptance runs.
//
// "Each transition wakes … the owner named by the idempotency key
// (wf:<workflowId>:… wakes that workflow)": the settling transaction records
// the wake (controlplane/commands/wakes, on River), delivered at least once to the
// module's waker, across restarts.
package modules

import (
	"context"
	"strconv"

	"github.com/riverqueue/river"

	"github.com/better-compute/commands/controlplane/commands/queue"
	"github.com/better-compute/commands/controlplane/commands/wakes"
	"github.com/better-compute/commands/sdk/kind"
)

// Module is one module. Name names it in logs and events. A module may also
// be a KindProvider, a Waker, a WorkerProvider and a Runner.
type Module interface {
	Name() string
}

// KindProvider registers the module's kinds (their manifests, as the
// first-party plugins' are) in the registry before the server starts.
type KindProvider interface {
	Kinds() []kind.Manifest
}

// Waker is a module woken when a command it owns settles. Prefixes are the
// key prefixes it owns ("wf:rem-"); Wake must be idempotent, since a wake
// is delivered at least once, and an error delivers it again later.
type Waker interface {
	Prefixes() []string
	Wake(ctx context.Context, w wakes.Wake) error
}

// WorkerProvider adds the module's own River workers (its jobs and
// workflow steps), with the queues they run on.
type WorkerProvider interface {
	AddWorkers(w *river.Workers) (queues map[string]river.QueueConfig, err error)
}

// Initializer is a module that needs its context before anything else of
// it runs (its waker may be called as soon as River starts): the host calls
// Init once, when it loads the module.
type Initializer interface {
	Init(mc *Context) error
}

// Runner is a module with a loop of its own (a reconciler), run in the
// process that runs the modules until ctx ends.
type Runner interface {
	Run(ctx context.Context, mc *Context) error
}

// Command is a command a module queues: any registered kind, with the
// module's own idempotency key.
type Command = queue.EnqueueParams

// StepKey is a workflow step's key, wf:<workflowId>:<stepId>, with
// :<attempt> appended for attempt 2 and later: "a deliberate retry of a
// step appends its attempt", since the same key returns the first command.
func StepKey(workflowID, stepID string, attempt int) string {
	k := queue.WorkflowKey(workflowID, stepID)
	if attempt > 1 {
		k += ":" + strconv.Itoa(attempt)
	}
	return k
}

// AcceptanceKey is an acceptance run's key,
// acceptance:<nodeId>:<attempt>:<kind>.
func AcceptanceKey(nodeID string, attempt int, kind string) string {
	return queue.AcceptanceKey(nodeID, attempt, kind)
}
