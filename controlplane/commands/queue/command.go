package queue

import (
	"encoding/json"
	"time"

	"github.com/better-compute/commands/controlplane/internal/store"
	"github.com/better-compute/commands/sdk/kind"
)

// DBTX is what read-only queries run on: a pool, a connection or a tx.
type DBTX = store.DBTX

// State is a command's state. A command starts pending; reports may skip
// steps, and a state never moves backwards.
type State string

// The command states, in rank order; the last five are terminal.
const (
	Pending    State = "pending"
	Dispatched State = "dispatched"
	Acked      State = "acked"
	Running    State = "running"
	Succeeded  State = "succeeded"
	Failed     State = "failed"
	Rejected   State = "rejected"
	Expired    State = "expired"
	Cancelled  State = "cancelled"
)

// States lists every state in rank order.
var States = []State{Pending, Dispatched, Acked, Running, Succeeded, Failed, Rejected, Expired, Cancelled}

// Terminal reports whether s ends a command: succeeded, failed, rejected,
// expired or cancelled.
func (s State) Terminal() bool {
	switch s {
	case Succeeded, Failed, Rejected, Expired, Cancelled:
		return true
	}
	return false
}

// Rank orders states as the database's bc_state_rank does: pending 0,
// dispatched 1, acked 2, running 3, every terminal state 4. A report lands
// only when it raises the rank; 0 also answers an unknown state.
func (s State) Rank() int {
	switch s {
	case Dispatched:
		return 1
	case Acked:
		return 2
	case Running:
		return 3
	case Succeeded, Failed, Rejected, Expired, Cancelled:
		return 4
	}
	return 0
}

// Valid reports whether s is one of the nine states.
func (s State) Valid() bool {
	for _, v := range States {
		if s == v {
			return true
		}
	}
	return false
}

// Reasons the queue itself writes.
const (
	ReasonCancelled   = kind.ReasonCancelled
	ReasonNodeDeleted = kind.ReasonNodeDeleted
)

// Command is one row of the command queue.
type Command struct {
	// ID is the command's cmd_… id.
	ID string
	// SecretRefs name the secrets the command may fetch (set by Enqueue;
	// a command read back holds them in CommandBytes: SecretRefsOf).
	SecretRefs []string
	// TenantID owns the node.
	TenantID string
	// NodeID is the node the command runs on.
	NodeID string
	// Seq is the command's place in the node's order, from nodes.next_cmd_seq:
	// gapless and unique per node.
	Seq int64
	// Kind is the registered kind name.
	Kind string
	// Lane is the kind's lane when it was queued.
	Lane kind.Lane
	// Payload is the validated payload, {} when none was given.
	Payload json.RawMessage
	// IdempotencyKey is unique per node; "" when none was given.
	IdempotencyKey string
	// State is the current state.
	State State
	// Reason says why the command ended (not_after, timeout, cancelled…):
	// always a bare machine code.
	Reason string
	// Message says in words what Reason codes (a refusal's explanation, a
	// failure's detail).
	Message string
	// WaitingReason and WaitingMessage say why a pending command is held
	// back (kind-mismatch: the node runs another manifest of its kind);
	// empty once it leaves pending.
	WaitingReason, WaitingMessage string
	// Blocked details WaitingReason when a person must act (the node runs
	// another digest of the kind, does not load it, or refused its plugin);
	// kept, as the two above, on a command that ended while it waited.
	Blocked *Blocked
	// KindVersion is the version of the kind's manifest that the node it
	// was dispatched to runs; "" before dispatch.
	KindVersion string
	// AwaitingApproval is set while the command's batch waits for its
	// approvals: the gateway holds it.
	AwaitingApproval bool
	// TraceParent is the W3C traceparent the command was queued under
	// (migration 0010), '' when none: the dispatch and settle spans join
	// that trace, and the node gets it beside the signed bytes.
	TraceParent string
	// Requester is who asked for the command (an API identity, an agent
	// principal, a module's or the reconciler's own name) and RequestedVia
	// how: api, mcp, module, fleet-run. The server sets both, never the
	// caller; '' for a command queued before migration 0090.
	Requester, RequestedVia string
	// NotAfter is the deadline for the node to accept it.
	NotAfter time.Time
	// NotBefore, when set, holds the command until then.
	NotBefore *time.Time
	// MinGeneration is the node spec generation the command presupposes.
	MinGeneration int64
	// Flags are the kind's wire flags when it was queued.
	Flags kind.Flags
	// BatchID names the destructive batch the command is part of.
	BatchID string
	// BundleKey is the support-bundle key of a logs.collect command.
	BundleKey string
	// CancelRequestedAt is set once a cancel was asked for an in-flight command.
	CancelRequestedAt *time.Time
	// Progress is the last progress the node reported.
	Progress json.RawMessage
	// Result is the node's result.
	Result json.RawMessage
	// ResultSHA256 is the SHA-256 of Result as the node reported it.
	ResultSHA256 []byte
	// NodeSig is the node's signature over an attested result, as received.
	NodeSig []byte
	// ResultBytes is an attested result exactly as the node sent it (the
	// jsonb Result normalises it; NodeSig is over the SHA-256 of these).
	ResultBytes []byte
	// Rebooted is set when a new boot completed a self-terminating kind.
	Rebooted bool
	// Attempts counts dispatches.
	Attempts int
	// DispatchedEpoch is the session epoch of the last dispatch.
	DispatchedEpoch int64
	// NextAttemptAt holds a BUSY command back until then.
	NextAttemptAt *time.Time
	// CreatedAt, UpdatedAt and SettledAt are the row's timestamps; SettledAt is
	// set exactly when State is terminal.
	CreatedAt, UpdatedAt time.Time
	SettledAt            *time.Time
	// CommandBytes is the serialized bc.agent.v1.Command made once at
	// enqueue (MarshalCommand), which the gateway relays unchanged; nil for
	// a row queued before migration 0003 (see WireBytes).
	CommandBytes []byte
	// Signature and WorkerCert are the signature over CommandBytes and the
	// signing worker key's certificate; nil until commands are signed.
	Signature, WorkerCert []byte
}

// How a command was requested (Command.RequestedVia).
const (
	// ViaAPI is commands.run by an API identity.
	ViaAPI = "api"
	// ViaMCP is commands.run by an agent principal (the MCP server's).
	ViaMCP = "mcp"
	// ViaModule, followed by ":" and the module's name, is a module's (or
	// the platform reconciler's) own command; the requester is the module's
	// name, or the person a module acts for (a metal run's requester).
	ViaModule = "module"
	// ViaFleetRun is a fleet run's command; the requester is the run's.
	ViaFleetRun = "fleet-run"
)

// EnqueueParams describe a command to queue.
type EnqueueParams struct {
	// TenantID must own the node; "" skips the check (a module acting for
	// the platform).
	TenantID string
	// NodeID is the target node.
	NodeID string
	// Kind must be registered.
	Kind string
	// Payload must satisfy the kind's schema; nil is {}.
	Payload json.RawMessage
	// IdempotencyKey, when set, makes a repeat return the first command.
	IdempotencyKey string
	// NotAfter is the deadline; zero means DefaultNotAfter from now.
	NotAfter time.Time
	// NotBefore, when set, holds the command until then.
	NotBefore *time.Time
	// MinGeneration is the spec generation the command presupposes.
	MinGeneration int64
	// BatchID names the destructive batch the command belongs to.
	BatchID string
	// AwaitingApproval holds the command until its batch is approved
	// (batches.CheckScope says so); the approval clears it and sets
	// notBefore.
	AwaitingApproval bool
	// TraceParent is the W3C traceparent of the caller's span (the API's
	// commands.run); '' for none.
	TraceParent string
	// BundleKey is the support-bundle key.
	BundleKey string
	// SecretRefs name the tenant's secrets the command may fetch when it
	// runs; they go in the signed command bytes, never a value.
	SecretRefs []string
	// Requester and RequestedVia record who asked for the command and how
	// (Command.Requester): the API sets them from the authenticated
	// identity, the module API from the module's name.
	Requester, RequestedVia string
}

// DefaultNotAfter is the deadline of a command queued without one.
const DefaultNotAfter = 600 * time.Second

// Transition is a state report for a command.
type Transition struct {
	// CommandID is the command.
	CommandID string
	// NodeID, when set, must be the command's node: a node's session moves
	// only its own commands, so a report naming another node's command id
	// is NOT_FOUND and changes nothing.
	NodeID string
	// To is the new state; it lands only when it ranks above the current one.
	To State
	// Reason says why (required sense for failed, rejected, expired): a bare
	// code; Message says it in words.
	Reason  string
	Message string
	// Result, ResultSHA256, NodeSig and Rebooted come with a terminal report;
	// ResultBytes keeps an attested result's exact bytes.
	Result       json.RawMessage
	ResultSHA256 []byte
	NodeSig      []byte
	ResultBytes  []byte
	Rebooted     bool
	// Progress, when set, replaces the stored progress.
	Progress json.RawMessage
	// KindVersion, with To dispatched, records the kind version the node
	// runs.
	KindVersion string
	// Epoch, when non-zero, fences the report: it lands only while the node's
	// session_epoch equals it, so a superseded session cannot move state.
	Epoch int64
}

// ListParams select one page of a node's commands.
type ListParams struct {
	// TenantID, when set, must own the node.
	TenantID string
	// NodeID is required.
	NodeID string
	// State, when set, filters on it.
	State State
	// Limit defaults to 100 and is capped at 200.
	Limit int
	// Cursor is the previous page's next cursor; "" is the first page.
	Cursor string
}

// Listing limits.
const (
	DefaultListLimit = 100
	MaxListLimit     = 200
)
