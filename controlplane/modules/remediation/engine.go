package remediation

import (
	"crypto/ed25519"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/better-compute/commands/controlplane/commands/batches"
	"github.com/better-compute/commands/controlplane/modules"
)

// The actions a remediation sends.
const (
	ActionGPUReset   = "gpu.reset"
	ActionNodeReboot = "node.reboot"
	// KindInventoryRefresh verifies a reset: its result is the fresh
	// inventory.
	KindInventoryRefresh = "inventory.refresh"
)

// Waiting reasons of the engine's own (pools' budget and lock reasons
// beside them).
const (
	WaitGPUInUse         = "gpu-in-use"
	WaitAllocationsLive  = "allocations-live"
	WaitSessionStale     = "session-stale"
	WaitAwaitingApproval = "awaiting-approval"
)

// Topics of the remediation events.
const (
	TopicPlanned          = "remediation.planned"
	TopicWaiting          = "remediation.waiting"
	TopicStarted          = "remediation.started"
	TopicVerifying        = "remediation.verifying"
	TopicFinished         = "remediation.finished"
	TopicEscalated        = "remediation.escalated"
	TopicHardwareTicket   = "node.hardware-ticket"
	TopicPlatformApproved = "remediation.batch.platform-approved"
)

// Options tune an Engine.
type Options struct {
	// Quorum is the destructive-batch quorum now (nil: none).
	Quorum func() batches.Quorum
	// PlatformKey, when set and one of the quorum's approver keys, signs
	// the platform's own batches as one approval (PlatformKeyName names
	// it in the audit); people approve the rest of the quorum. Without it,
	// platform batches wait for people.
	PlatformKey     ed25519.PrivateKey
	PlatformKeyName string
	// StaleAfter skips a node whose session was not seen for longer (90s).
	StaleAfter time.Duration
	// VerifyTimeout bounds the wait for a reboot's outcome to show (5m).
	VerifyTimeout time.Duration
	// NotAfter is the destructive command's deadline from its queueing (10m).
	NotAfter time.Duration
	// MaxPerWeek remediations of one node within 7 days escalate to a
	// hardware ticket instead of another try (5; 0 keeps the default).
	MaxPerWeek int
	// StillNeeded says whether the trigger of r still holds on n, in words;
	// false cancels a waiting remediation and, after the work, is the
	// verification that the condition cleared.
	StillNeeded func(n modules.NodeView, r Row) (bool, string)
	// Now is the clock (time.Now).
	Now func() time.Time
}

// Engine runs one owner's remediations: it plans them, takes them through
// the pool's budget and the node's lock, sends the command under a platform
// batch, verifies and finishes them, and trips the pool's breaker.
type Engine struct {
	owner string
	mc    *modules.Context
	opts  Options
}

// NewEngine returns the engine of owner (the module's name) on mc.
func NewEngine(owner string, mc *modules.Context, opts Options) *Engine {
	if opts.StaleAfter <= 0 {
		opts.StaleAfter = 90 * time.Second
	}
	if opts.VerifyTimeout <= 0 {
		opts.VerifyTimeout = 5 * time.Minute
	}
	if opts.NotAfter <= 0 {
		opts.NotAfter = 10 * time.Minute
	}
	if opts.MaxPerWeek <= 0 {
		opts.MaxPerWeek = 5
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Quorum == nil {
		opts.Quorum = func() batches.Quorum { return batches.Quorum{} }
	}
	if opts.StillNeeded == nil {
		opts.StillNeeded = func(modules.NodeView, Row) (bool, string) { return true, "" }
	}
	return &Engine{owner: owner, mc: mc, opts: opts}
}

// Pool is the database the engine works on.
func (e *Engine) Pool() *pgxpool.Pool { return e.mc.Pool() }

// Prefix is the key prefix of the engine's commands: wf:<owner>-, the
// workflow ids being the remediation ids.
func (e *Engine) Prefix() string { return "wf:" + e.owner + "-" }

// lockNodeSQL serialises, per node, planning a remediation and finishing
// one: without it a plan racing a finish sees the running row, then inserts
// beside the just-finished one (the open-row index no longer conflicts),
// skipping the cooldown.
const lockNodeSQL = `SELECT pg_advisory_xact_lock(hashtextextended('bc-remediation:' || $1, 0))`
