// Package fleetruns runs one kind on many nodes: a fleet run is a parent of
// ordinary commands. Its targets are resolved once, at creation, and
// stored; a leader-elected advancer then queues each target's command
// through the command queue (the same checks, bytes, signature, delivery,
// journal and settle as commands.run), keeping at most the run's
// concurrency limit open, and stops starting new ones once failures exceed
// its error limit. A settled command updates its target in the very
// transaction that settles it (the queue's settle hook), and each target's
// command carries the idempotency key run:<runId>:<nodeId>, unique per
// node, so a kill -9 at any point neither loses a settle nor starts a node
// twice. Destructive kinds go under one batch whose leaves name every
// target; disruptive ones also take each node's maintenance lock within its
// pool's disruption budget, and the run says what it waits for.
package fleetruns

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/better-compute/commands/controlplane/internal/errcode"
)

// Run states. The first four are open; the last three are ended.
const (
	StateRunning    = "running"
	StatePaused     = "paused"
	StateStopping   = "stopping"
	StateCancelling = "cancelling"
	StateSucceeded  = "succeeded"
	StateFailed     = "failed"
	StateCancelled  = "cancelled"
)

// Target states.
const (
	TargetWaiting    = "waiting"
	TargetStarted    = "started"
	TargetSucceeded  = "succeeded"
	TargetFailed     = "failed"
	TargetRejected   = "rejected"
	TargetExpired    = "expired"
	TargetCancelled  = "cancelled"
	TargetNotStarted = "not-started"
	TargetRefused    = "refused"
)

// TargetStates lists every target state, in the order tables show them.
var TargetStates = []string{TargetWaiting, TargetStarted, TargetSucceeded, TargetFailed, TargetRejected, TargetExpired, TargetCancelled, TargetNotStarted, TargetRefused}

// Reasons a run ends other than succeeded, or a target is not started.
const (
	ReasonMaxErrors     = "max-errors"
	ReasonNodeFailures  = "node-failures"
	ReasonCancelled     = "cancelled"
	ReasonBatchExpired  = "batch-expired"
	ReasonNotFound      = "not-found"
	ReasonPermission    = "permission-denied"
	ReasonRole          = "role-mismatch"
	ReasonRestricted    = "restricted-identity"
	ReasonEnqueueRefuse = "enqueue-refused"
)

// What a run waits for while it has waiting targets but starts none.
const (
	WaitApproval = "awaiting-approval"
	WaitPaused   = "paused"
)

// TopicPrefix starts every fleet run's event; each carries the run's id
// and requester, which events.watch checks (a run's events reach its
// requester and the holders of compute:runs:read).
const TopicPrefix = "fleet.run."

// Event topics on the outbox.
const (
	TopicCreated         = "fleet.run.created"
	TopicProgress        = "fleet.run.progress"
	TopicPaused          = "fleet.run.paused"
	TopicResumed         = "fleet.run.resumed"
	TopicCancelRequested = "fleet.run.cancel-requested"
	TopicStopping        = "fleet.run.stopping"
	TopicWaiting         = "fleet.run.waiting"
	TopicFinished        = "fleet.run.finished"
)

// Targets selects a run's nodes: a node is a target when it matches every
// criterion given.
type Targets struct {
	NodeIDs    []string `json:"nodeIds,omitempty"`
	Pool       string   `json:"pool,omitempty"`
	Selector   string   `json:"selector,omitempty"`
	Conditions []string `json:"conditions,omitempty"`
	All        bool     `json:"all,omitempty"`
}

// Run is a fleet run as stored, with its counts.
type Run struct {
	ID, TenantID, Kind                   string
	Payload                              json.RawMessage
	Targets                              Targets
	MaxConcurrency, MaxErrors            string
	ConcurrencyLimit, ErrorLimit         int
	NotAfterSeconds                      int
	Reason, Requester, RequestedVia      string
	IdempotencyKey, BatchID              string
	Disruptive                           bool
	State, StateReason, StateMessage     string
	WaitingReason, WaitingMessage        string
	CreatedAt, UpdatedAt                 time.Time
	StartedAt, FinishedAt, CancelRequest *time.Time
	Counts                               Counts
	// Refused are the targets refused at creation (up to MaxRefusedShown).
	Refused []Target
	// published is the counts last published in fleet.run.progress.
	published []byte
}

// Ended reports whether the run has ended.
func (r Run) Ended() bool {
	return r.State == StateSucceeded || r.State == StateFailed || r.State == StateCancelled
}

// Counts counts a run's targets by state and reason.
type Counts struct {
	Targets  int
	ByState  map[string]int
	ByReason map[string]int
}

// Failures is failed, rejected and expired together: what the error limit
// counts ("failures (failed, rejected, expired, timeout)"; a timeout is a
// failed command).
func (c Counts) Failures() int {
	return c.ByState[TargetFailed] + c.ByState[TargetRejected] + c.ByState[TargetExpired]
}

// Target is one node of a run.
type Target struct {
	RunID                   string
	Ordinal                 int
	NodeID, Pool, State     string
	CommandID, CommandState string
	Reason, Message         string
	StartedAt, SettledAt    *time.Time
}

// MaxRefusedShown bounds the refused targets a run carries when read.
const MaxRefusedShown = 1000

// MaxTargets bounds a run's targets (a batch's leaves are bounded alike).
const MaxTargets = 10000

func invalid(field, format string, args ...any) error {
	return &errcode.Error{Code: errcode.InvalidInput, Reason: "invalid-" + field, Message: fmt.Sprintf(format, args...),
		Details: map[string]string{"field": field}}
}

// Limit parses a count ("10") or a percentage ("25%") of n targets.
// Percentages of the concurrency round up (at least one node starts);
// those of the error limit round down (a tolerance never grows past what
// was asked).
func Limit(field, s string, n int, roundUp bool) (int, error) {
	s = strings.TrimSpace(s)
	if pct, ok := strings.CutSuffix(s, "%"); ok {
		p, err := strconv.ParseFloat(strings.TrimSpace(pct), 64)
		if err != nil || math.IsNaN(p) || math.IsInf(p, 0) {
			return 0, invalid(field, "%s %q: want a count (10) or a percentage of the targets (25%%)", field, s)
		}
		if p < 0 || p > 100 {
			return 0, invalid(field, "%s %q: a percentage must be 0%% to 100%%", field, s)
		}
		v := p * float64(n) / 100
		if roundUp {
			return max(1, int(math.Ceil(v-1e-9))), checkPositive(field, s, p, roundUp)
		}
		return int(math.Floor(v + 1e-9)), nil
	}
	v, err := strconv.Atoi(s)
	if err != nil {
		return 0, invalid(field, "%s %q: want a count (10) or a percentage of the targets (25%%)", field, s)
	}
	if v < 0 {
		return 0, invalid(field, "%s %d must not be negative", field, v)
	}
	if roundUp && v == 0 {
		return 0, invalid(field, "%s 0 would start nothing: give 1 or more, or a percentage up to 100%%", field)
	}
	return v, nil
}

func checkPositive(field, s string, p float64, roundUp bool) error {
	if roundUp && p == 0 {
		return invalid(field, "%s %q would start nothing: give more than 0%%", field, s)
	}
	return nil
}
