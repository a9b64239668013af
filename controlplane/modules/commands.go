package modules

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/better-compute/commands/controlplane/commands/queue"
	"github.com/better-compute/commands/controlplane/internal/errcode"
	"github.com/better-compute/commands/controlplane/internal/store"
)

// The queue's types and constants that a module reads, named here so that
// a module imports the module API and never the queue itself
// (internal/depcheck holds that wall): each is the queue's own, an alias,
// so a value passes between the two unchanged.
type (
	// StoredCommand is a command as the queue stores it (its state, reason,
	// message, result, batch…): what Enqueue and Cancel return and Get and
	// List read, for a module to follow the commands it queued.
	StoredCommand = queue.Command
	// State is a command's state (StatePending … StateCancelled), which a
	// module's outcome code switches on.
	State = queue.State
	// Contradiction is a node's terminal report that came after its command
	// was already settled another way, stored beside the command
	// (Contradictions): a module acts on it as news (a rollback reported
	// after the rollout module failed the upgrade is still a rollback).
	Contradiction = queue.Contradiction
	// ListParams select one page of a node's commands (List): the node, a
	// state, the page's size and cursor.
	ListParams = queue.ListParams
	// CommandRef names a command on its node, for InFlight.
	CommandRef = queue.CommandRef
)

// The command states, in rank order (the last five are terminal), for a
// module's comparisons with StoredCommand.State.
const (
	StatePending    = queue.Pending
	StateDispatched = queue.Dispatched
	StateAcked      = queue.Acked
	StateRunning    = queue.Running
	StateSucceeded  = queue.Succeeded
	StateFailed     = queue.Failed
	StateRejected   = queue.Rejected
	StateExpired    = queue.Expired
	StateCancelled  = queue.Cancelled
)

// ErrKeyRace is the queue's: Enqueue returns it (wrapped) when another
// transaction queued the same idempotency key during this one; the module
// rolls its transaction back and runs it again. The queue's refusals are
// otherwise errcode's (controlplane/internal/errcode), which a module reads
// directly.
var ErrKeyRace = queue.ErrKeyRace

// Commands is the command queue as one module uses it: it queues, checks
// and cancels commands in the caller's transaction, fails one that its
// node will never report, and reads the commands back. Enqueue, EnqueueFor
// and Cancel apply the module's rules (its own keys, its name as who asked
// or how); Enqueue and Cancel name the module in their errors. The reads,
// Check, Fail and EnqueueFor return the queue's errors unwrapped, as the
// modules got them when they called the queue directly (the caller names
// what it was doing).
type Commands struct {
	q      *queue.Queue
	module string
}

// checkKey refuses an idempotency key that is not a module's own: none, an
// API caller's (api:…) or a fleet run's (run:…).
func (c Commands) checkKey(key string) error {
	if key == "" {
		return &errcode.Error{Code: errcode.InvalidInput, Reason: "missing-field", Details: map[string]string{"field": "idempotencyKey"},
			Message: fmt.Sprintf("module %s: a module's command needs its own idempotency key (wf:<workflowId>:<stepId>, acceptance:<nodeId>:<attempt>:<kind>)", c.module)}
	}
	if strings.HasPrefix(key, queue.APIKeyPrefix) {
		return &errcode.Error{Code: errcode.InvalidInput, Reason: "invalid-idempotency-key", Details: map[string]string{"field": "idempotencyKey"},
			Message: fmt.Sprintf("module %s: idempotency key %q is an API caller's (api:…); a module uses its own keys", c.module, key)}
	}
	if strings.HasPrefix(key, queue.FleetRunKeyPrefix) {
		// A run:… key would be taken for a fleet run's command.
		return &errcode.Error{Code: errcode.InvalidInput, Reason: "invalid-idempotency-key", Details: map[string]string{"field": "idempotencyKey"},
			Message: fmt.Sprintf("module %s: idempotency key %q is a fleet run's (run:…); a module uses its own keys", c.module, key)}
	}
	return nil
}

// via is how a module's command was requested: module:<name>.
func (c Commands) via() string { return queue.ViaModule + ":" + c.module }

// Enqueue queues cmd in tx: the command exists exactly when tx commits, so
// a module's rows and its commands commit or roll back together. The
// module must give an idempotency key that is its own (wf:…, acceptance:…,
// or another non-API key): a settled command wakes the owner its key
// names, and a repeat returns the first command with duplicate set. Every
// rule of the queue applies (kind registered, payload valid, node
// visible, a destructive kind in a batch under the quorum).
func (c Commands) Enqueue(ctx context.Context, tx pgx.Tx, cmd Command) (StoredCommand, bool, error) {
	if err := c.checkKey(cmd.IdempotencyKey); err != nil {
		return StoredCommand{}, false, err
	}
	// Who asked is the module, by its own name: a caller cannot name
	// another requester.
	cmd.Requester, cmd.RequestedVia = c.module, c.via()
	out, dup, err := c.q.Enqueue(ctx, tx, cmd)
	if err != nil {
		return StoredCommand{}, false, fmt.Errorf("module %s: %w", c.module, err)
	}
	return out, dup, nil
}

// EnqueueFor queues cmd in tx as Enqueue does, for a person who asked the
// module for it through the module's own API (a metal run's caller asked
// for each of its steps; the module queues them): the command's requester
// is that person, as the API authenticated them, and it came through the
// module (requestedVia module:<name>). The same key rules hold. Its errors
// are the queue's, unwrapped: the module's API answers its caller with
// them.
func (c Commands) EnqueueFor(ctx context.Context, tx pgx.Tx, requester string, cmd Command) (StoredCommand, bool, error) {
	if err := c.checkKey(cmd.IdempotencyKey); err != nil {
		return StoredCommand{}, false, err
	}
	cmd.Requester, cmd.RequestedVia = requester, c.via()
	return c.q.Enqueue(ctx, tx, cmd)
}

// Check runs the checks of cmd that Enqueue makes without the database
// (the kind registered, its payload against its schema, the secret refs,
// the batch id, a destructive kind's batch under the quorum), queueing
// nothing: a module checks every step of a run it will queue later, so
// that a run that could not finish is refused whole.
func (c Commands) Check(cmd Command) error { return c.q.Check(cmd) }

// Cancel cancels command commandID in tx, as commands.cancel does: a
// pending one is cancelled at once (and wakes its owner when tx commits),
// an in-flight one is marked cancel_requested_at, a terminal one comes back
// unchanged, an unknown one is NOT_FOUND.
func (c Commands) Cancel(ctx context.Context, tx pgx.Tx, commandID string) (StoredCommand, error) {
	out, err := c.q.Cancel(ctx, tx, "", commandID)
	if err != nil {
		return StoredCommand{}, fmt.Errorf("module %s: %w", c.module, err)
	}
	return out, nil
}

// Get reads command commandID of node nodeID ("" accepts any node) on db
// (the module's transaction, to read it with the module's rows). An
// unknown command, or one of another node, is NOT_FOUND. A module reads
// its own commands' outcomes so (a wake carries a copy, which may be
// stale).
func (c Commands) Get(ctx context.Context, db store.DBTX, nodeID, commandID string) (StoredCommand, error) {
	return c.q.Get(ctx, db, nodeID, commandID)
}

// List reads one page of a node's commands on db, newest first, as the
// API's commands.list does: the node's commands whoever queued them, since
// a module may look at what else a node runs. next is the cursor of the
// following page ("" on the last).
func (c Commands) List(ctx context.Context, db store.DBTX, p ListParams) (items []StoredCommand, next string, err error) {
	return c.q.List(ctx, db, p)
}

// Contradictions reads the contradicting reports stored beside command
// commandID, oldest first: the news a module acts on when the node says
// something else than the command keeps.
func (c Commands) Contradictions(ctx context.Context, db store.DBTX, commandID string) ([]Contradiction, error) {
	return c.q.Contradictions(ctx, db, commandID)
}

// InFlight says which of refs are in flight (dispatched, acked or running:
// sent to the node and not settled), by command id, in one read: a
// module's pass over the commands it waits on, without SQL of its own
// against the commands table.
func (c Commands) InFlight(ctx context.Context, db store.DBTX, refs []CommandRef) (map[string]bool, error) {
	return c.q.InFlight(ctx, db, refs)
}

// Fail settles command commandID of node nodeID failed, with reason and
// message, in the control plane's name, as the sweeper fails an overdue
// command: for one of the module's commands whose node will not report
// (the rollout module's upgrade whose new daemon stayed silent past its
// rejoin window). db is a pool or the module's transaction. The queue's
// forward-only rule holds: a command already terminal is left as it is
// (changed false), and a report its node sends later anyway is stored
// beside it (a Contradiction). The settle wakes the command's owner. A
// module fails only the commands it queued.
func (c Commands) Fail(ctx context.Context, db store.DBTX, nodeID, commandID, reason, message string) (StoredCommand, bool, error) {
	return c.q.Transition(ctx, db, queue.Transition{CommandID: commandID, NodeID: nodeID, To: queue.Failed, Reason: reason, Message: message})
}
