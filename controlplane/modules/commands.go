package modules

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/better-compute/commands/controlplane/commands/queue"
	"github.com/better-compute/commands/controlplane/internal/errcode"
)

// Commands queues and cancels commands for one module, in the caller's
// transaction.
type Commands struct {
	q      *queue.Queue
	module string
}

// Enqueue queues cmd in tx: the command exists exactly when tx commits, so
// a module's rows and its commands commit or roll back together. The
// module must give an idempotency key that is its own (wf:…, acceptance:…,
// or another non-API key): a settled command wakes the owner its key
// names, and a repeat returns the first command with duplicate set. Every
// rule of the queue applies (kind registered, payload valid, node
// visible, a destructive kind in a batch under the quorum).
func (c Commands) Enqueue(ctx context.Context, tx pgx.Tx, cmd Command) (queue.Command, bool, error) {
	if cmd.IdempotencyKey == "" {
		return queue.Command{}, false, &errcode.Error{Code: errcode.InvalidInput, Reason: "missing-field", Details: map[string]string{"field": "idempotencyKey"},
			Message: fmt.Sprintf("module %s: a module's command needs its own idempotency key (wf:<workflowId>:<stepId>, acceptance:<nodeId>:<attempt>:<kind>)", c.module)}
	}
	if strings.HasPrefix(cmd.IdempotencyKey, queue.APIKeyPrefix) {
		return queue.Command{}, false, &errcode.Error{Code: errcode.InvalidInput, Reason: "invalid-idempotency-key", Details: map[string]string{"field": "idempotencyKey"},
			Message: fmt.Sprintf("module %s: idempotency key %q is an API caller's (api:…); a module uses its own keys", c.module, cmd.IdempotencyKey)}
	}
	if strings.HasPrefix(cmd.IdempotencyKey, queue.FleetRunKeyPrefix) {
		// A run:… key would be taken for a fleet run's command.
		return queue.Command{}, false, &errcode.Error{Code: errcode.InvalidInput, Reason: "invalid-idempotency-key", Details: map[string]string{"field": "idempotencyKey"},
			Message: fmt.Sprintf("module %s: idempotency key %q is a fleet run's (run:…); a module uses its own keys", c.module, cmd.IdempotencyKey)}
	}
	// Who asked is the module, by its own name: a caller cannot name
	// another requester.
	cmd.Requester, cmd.RequestedVia = c.module, queue.ViaModule+":"+c.module
	out, dup, err := c.q.Enqueue(ctx, tx, cmd)
	if err != nil {
		return queue.Command{}, false, fmt.Errorf("module %s: %w", c.module, err)
	}
	return out, dup, nil
}

// Cancel cancels command commandID in tx, as commands.cancel does: a
// pending one is cancelled at once (and wakes its owner when tx commits),
// an in-flight one is marked cancel_requested_at, a terminal one comes back
// unchanged, an unknown one is NOT_FOUND.
func (c Commands) Cancel(ctx context.Context, tx pgx.Tx, commandID string) (queue.Command, error) {
	out, err := c.q.Cancel(ctx, tx, "", commandID)
	if err != nil {
		return queue.Command{}, fmt.Errorf("module %s: %w", c.module, err)
	}
	return out, nil
}
