package journal

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"time"

	"github.com/better-compute/commands/sdk/kind"
)

// State is a command's state in the journal.
type State string

// The journal's states. Accepted and running are the unfinished ones that
// Recover resolves; the others are terminal.
const (
	StateAccepted  State = "accepted"
	StateRunning   State = "running"
	StateSucceeded State = "succeeded"
	StateFailed    State = "failed"
	StateRejected  State = "rejected"
	StateExpired   State = "expired"
	StateCancelled State = "cancelled"
)

// Terminal reports whether s is a final state: "succeeded, failed, rejected,
// expired and cancelled are terminal."
func (s State) Terminal() bool {
	switch s {
	case StateSucceeded, StateFailed, StateRejected, StateExpired, StateCancelled:
		return true
	}
	return false
}

// Failure reasons the daemon writes into records.
const (
	// ReasonInterrupted: bcd stopped while a command that is not retry-safe ran.
	ReasonInterrupted = kind.ReasonInterrupted
	// ReasonNotRebooted: a self-terminating kind was interrupted but the boot
	// id did not change, so the reboot did not happen.
	ReasonNotRebooted = "reboot-did-not-happen"
)

// Record is everything the journal keeps about one command.
type Record struct {
	// ID is the command id (cmd_…); the journal's key.
	ID string `json:"id"`
	// Kind is the command's kind.
	Kind string `json:"kind"`
	// NodeID is the node the command named.
	NodeID string `json:"nodeId,omitempty"`
	// Seq is the control plane's per-node sequence number.
	Seq int64 `json:"seq,omitempty"`
	// State is the command's state.
	State State `json:"state"`
	// Reason is the failure reason or the refusal's explanation.
	Reason string `json:"reason,omitempty"`
	// RejectCode is the acceptance refusal ("STALE_GENERATION") of a rejected command.
	RejectCode string `json:"rejectCode,omitempty"`
	// Message is a readable explanation of the outcome.
	Message string `json:"message,omitempty"`
	// CommandDigest is the hex trust.CommandDigest of the exact command
	// bytes the command arrived as (empty for a local bcd exec): an
	// attested result names it, so a result re-sent from the journal after
	// a restart is signed for the same command bytes.
	CommandDigest string `json:"commandDigest,omitempty"`
	// Payload is the command's payload, kept so a retry-safe command can run
	// again after a crash.
	Payload json.RawMessage `json:"payload,omitempty"`
	// SecretRefs are the names of the secrets the command fetches when it
	// runs (never their values, which are never journaled).
	SecretRefs []string `json:"secretRefs,omitempty"`
	// Result is the kind's JSON result document.
	Result json.RawMessage `json:"result,omitempty"`
	// ResultSHA256 is the hex SHA-256 of Result.
	ResultSHA256 string `json:"resultSha256,omitempty"`
	// Lane is the kind's lane when the command was accepted.
	Lane kind.Lane `json:"lane,omitempty"`
	// Flags are the kind's wire flags when the command was accepted.
	Flags kind.Flags `json:"flags"`
	// BootID is the boot id at acceptance: a self-terminating kind is
	// journaled with it before the call, so a new boot proves it happened.
	BootID string `json:"bootId,omitempty"`
	// Rebooted is set when a new boot completed a self-terminating kind.
	Rebooted bool `json:"rebooted,omitempty"`
	// NotAfter is the command's deadline.
	NotAfter time.Time `json:"notAfter"`
	// MinGeneration is the node spec generation the command presupposes.
	MinGeneration int64 `json:"minGeneration,omitempty"`
	// Attempts counts the runs started, a rerun after a crash included.
	Attempts int `json:"attempts,omitempty"`
	// CancelRequested is set once a cancel reached bcd.
	CancelRequested bool `json:"cancelRequested,omitempty"`
	// AcceptedAt, StartedAt and FinishedAt are bcd's clock.
	AcceptedAt time.Time `json:"acceptedAt"`
	StartedAt  time.Time `json:"startedAt,omitzero"`
	FinishedAt time.Time `json:"finishedAt,omitzero"`
	// Order is the journal's own insertion counter; Recent sorts by it.
	Order uint64 `json:"order"`
}

// SetResult stores result and its SHA-256.
func (r *Record) SetResult(result json.RawMessage) {
	if len(result) == 0 {
		r.Result, r.ResultSHA256 = nil, ""
		return
	}
	r.Result = append(json.RawMessage(nil), result...)
	sum := sha256.Sum256(result)
	r.ResultSHA256 = hex.EncodeToString(sum[:])
}

// keepUntil is when compaction may drop the record: not before not_after
// plus the replay horizon, so that every replay of it is still answered.
func (r Record) keepUntil(horizon time.Duration) time.Time {
	t := r.NotAfter
	if r.FinishedAt.After(t) {
		t = r.FinishedAt
	}
	return t.Add(horizon)
}
