// Package accept holds the daemon's acceptance checks: a pure function from
// a command and what the node knows to a decision. The spec fixes the order:
//
//  1. UNSUPPORTED: the body names another node, or the kind is unknown or not
//     allowed for its role;
//  2. STALE_GENERATION: min_generation is ahead of the spec it applied;
//  3. EXPIRED: past not_after, in server time;
//  4. BAD_SIGNATURE: once the trust bundle holds command-signing roots (on
//     a node with trust anchors, from the start), a command without a valid
//     signature;
//  5. BATCH_UNAPPROVED or UNBATCHED_LIMIT: with approver keys, a destructive
//     command outside an approved batch;
//  6. BUSY: no free worker in the kind's lane.
//
// The refusals other than BUSY are journaled, so a duplicate delivery gets
// the same answer; Decision.Journal says which.
package accept

import (
	"encoding/json"
	"fmt"
	"slices"
	"time"

	agentv1 "github.com/better-compute/commands/proto/bc/agent/v1"
	"github.com/better-compute/commands/sdk/kind"
)

// Code is a refusal code, as the spec names it.
type Code string

// The refusal codes, in the spec's order of checks.
const (
	Unsupported     Code = "UNSUPPORTED"
	StaleGeneration Code = "STALE_GENERATION"
	Expired         Code = "EXPIRED"
	BadSignature    Code = "BAD_SIGNATURE"
	BatchUnapproved Code = "BATCH_UNAPPROVED"
	UnbatchedLimit  Code = "UNBATCHED_LIMIT"
	Busy            Code = "BUSY"
)

var codeToProto = map[Code]agentv1.RejectCode{
	Unsupported:     agentv1.RejectCode_REJECT_CODE_UNSUPPORTED,
	StaleGeneration: agentv1.RejectCode_REJECT_CODE_STALE_GENERATION,
	Expired:         agentv1.RejectCode_REJECT_CODE_EXPIRED,
	BadSignature:    agentv1.RejectCode_REJECT_CODE_BAD_SIGNATURE,
	BatchUnapproved: agentv1.RejectCode_REJECT_CODE_BATCH_UNAPPROVED,
	UnbatchedLimit:  agentv1.RejectCode_REJECT_CODE_UNBATCHED_LIMIT,
	Busy:            agentv1.RejectCode_REJECT_CODE_BUSY,
}

// Proto returns the code for the session protocol.
func (c Code) Proto() agentv1.RejectCode { return codeToProto[c] }

// CodeFromProto maps a session protocol code back; "" for unspecified.
func CodeFromProto(p agentv1.RejectCode) Code {
	for c, pc := range codeToProto {
		if pc == p {
			return c
		}
	}
	return ""
}

// Command is what the checks read of a command.
type Command struct {
	// ID is the command id (cmd_…).
	ID string `json:"id"`
	// NodeID is the node the command's body names.
	NodeID string `json:"nodeId"`
	// Seq is the per-node sequence number.
	Seq int64 `json:"seq,omitempty"`
	// Kind is the command kind.
	Kind string `json:"kind"`
	// Payload is the JSON payload.
	Payload json.RawMessage `json:"payload,omitempty"`
	// NotAfter is the deadline, in server time.
	NotAfter time.Time `json:"notAfter"`
	// MinGeneration is the node spec generation the command presupposes; 0
	// when it presupposes none.
	MinGeneration int64 `json:"minGeneration,omitempty"`
	// BatchID names the destructive batch the command belongs to, if any.
	BatchID string `json:"batchId,omitempty"`
	// SecretRefs name the secrets the command may fetch: names, never
	// values.
	SecretRefs []string `json:"secretRefs,omitempty"`
	// Envelope is the command as received (exact bytes, signature, batch
	// approval, inclusion proof); nil for a local `bcd exec`.
	Envelope *agentv1.CommandEnvelope `json:"-"`
}

// Trust is the node's trust bundle, as far as commands are concerned.
type Trust interface {
	// HasCommandSigningRoots reports whether the bundle holds any
	// command-signing root (or the node has trust anchors, which stand in
	// for them); until it does, commands go unsigned.
	HasCommandSigningRoots() bool
	// VerifyCommand checks the envelope's signature over its exact command
	// bytes against the roots. It returns nil when it verifies.
	VerifyCommand(cmd Command) error
}

// Batches is the destructive-batch quorum as the node sees it.
type Batches interface {
	// HasApproverKeys reports whether approver keys are configured; without
	// them a batch is recorded for audit only.
	HasApproverKeys() bool
	// VerifyApproval checks that cmd is in an approved batch: the approval
	// verifies against the approver keys and the inclusion proof puts the
	// command's leaf under it. It returns nil when it does. It consumes
	// nothing: the caller consumes the leaf of a command it accepts
	// (Decision.UsesBatchLeaf).
	VerifyApproval(cmd Command) error
	// UnbatchedAllowed reports whether the break-glass allowance
	// (unbatchedDestructivePerHour) has room for one more unbatched
	// destructive command at now.
	UnbatchedAllowed(now time.Time) bool
}

// Lanes says whether a lane has a free worker.
type Lanes interface {
	Free(l kind.Lane) bool
}

// Input is everything the checks read. It is plain data (and read-only
// interfaces), so Check is a pure function of it.
type Input struct {
	Command Command
	// NodeID and Role are the node's identity.
	NodeID string
	Role   string
	// AllowedKinds restricts a node whose certificate carries allowed kinds
	// (a discovery ramdisk); nil means no restriction.
	AllowedKinds []string
	// Kinds are the loaded kinds' manifests by kind name.
	Kinds map[string]kind.Manifest
	// AppliedGeneration is the node spec generation the node applied.
	AppliedGeneration int64
	// Now is the node's clock; ServerOffset is server time minus node time,
	// kept from Welcome.server_time.
	Now          time.Time
	ServerOffset time.Duration
	// Trust, Batches and Lanes may be nil: no roots, no approver keys,
	// every lane free.
	Trust   Trust
	Batches Batches
	Lanes   Lanes
}

// ServerNow is the input's now in server time.
func (in Input) ServerNow() time.Time { return in.Now.Add(in.ServerOffset) }

// Decision is the checks' answer.
type Decision struct {
	// Accepted is true when every check passed.
	Accepted bool
	// Code is the refusal; "" when accepted.
	Code Code
	// Reason explains the refusal in words.
	Reason string
	// Manifest is the kind's manifest when the kind is known.
	Manifest kind.Manifest
	// WaitForSpec is set with STALE_GENERATION before not_after: the daemon
	// asks for the spec and checks again when a newer one is applied, and
	// rejects at not_after.
	WaitForSpec bool
	// UsesUnbatchedAllowance is set when a destructive command was accepted
	// on the break-glass allowance, which the caller then consumes.
	UsesUnbatchedAllowance bool
	// UsesBatchLeaf is set when a destructive command was accepted in an
	// approved batch: the caller consumes its leaf, so that no other
	// command runs on it.
	UsesBatchLeaf bool
}

// Journal reports whether the refusal is journaled: all but BUSY, which the
// gateway retries, and a STALE_GENERATION that still waits for the spec.
func (d Decision) Journal() bool {
	return !d.Accepted && d.Code != Busy && !d.WaitForSpec
}

func reject(c Code, format string, args ...any) Decision {
	return Decision{Code: c, Reason: fmt.Sprintf(format, args...)}
}

// Check runs the six checks in the spec's order and returns the first
// refusal, or an acceptance.
func Check(in Input) Decision {
	cmd := in.Command
	// 1. UNSUPPORTED
	if cmd.NodeID != in.NodeID {
		return reject(Unsupported, "the command names node %q, this is %q", cmd.NodeID, in.NodeID)
	}
	m, ok := in.Kinds[cmd.Kind]
	if !ok {
		return reject(Unsupported, "kind %q is not loaded on this node", cmd.Kind)
	}
	if !m.AllowsRole(in.Role) {
		return withManifest(reject(Unsupported, "kind %q is not allowed for role %q (allowed: %v)", cmd.Kind, in.Role, m.Roles), m)
	}
	if in.AllowedKinds != nil && !slices.Contains(in.AllowedKinds, cmd.Kind) {
		return withManifest(reject(Unsupported, "this node runs a restricted identity that does not accept %q", cmd.Kind), m)
	}
	// 2. STALE_GENERATION: wait for the spec until not_after, then reject.
	now := in.ServerNow()
	if cmd.MinGeneration > in.AppliedGeneration {
		d := withManifest(reject(StaleGeneration, "the command needs node spec generation %d; applied is %d", cmd.MinGeneration, in.AppliedGeneration), m)
		d.WaitForSpec = now.Before(cmd.NotAfter)
		return d
	}
	// 3. EXPIRED
	if !now.Before(cmd.NotAfter) {
		return withManifest(reject(Expired, "not_after %s has passed (server time %s)", cmd.NotAfter.UTC().Format(time.RFC3339), now.UTC().Format(time.RFC3339)), m)
	}
	// 4. BAD_SIGNATURE: every kind, once there are roots.
	if in.Trust != nil && in.Trust.HasCommandSigningRoots() {
		if cmd.Envelope == nil || len(cmd.Envelope.GetSignature()) == 0 {
			return withManifest(reject(BadSignature, "the command is unsigned and the trust bundle holds command-signing roots"), m)
		}
		if err := in.Trust.VerifyCommand(cmd); err != nil {
			return withManifest(reject(BadSignature, "the command's signature does not verify: %v", err), m)
		}
	}
	// 5. BATCH_UNAPPROVED or UNBATCHED_LIMIT
	unbatched, batched := false, false
	if m.Flags.Destructive && in.Batches != nil && in.Batches.HasApproverKeys() {
		if cmd.BatchID != "" {
			if err := in.Batches.VerifyApproval(cmd); err != nil {
				return withManifest(reject(BatchUnapproved, "batch %s: %v", cmd.BatchID, err), m)
			}
			batched = true
		} else {
			if !in.Batches.UnbatchedAllowed(now) {
				return withManifest(reject(UnbatchedLimit, "destructive kind %q outside an approved batch, and no break-glass allowance is left", cmd.Kind), m)
			}
			unbatched = true
		}
	}
	// 6. BUSY
	if in.Lanes != nil && !in.Lanes.Free(m.Lane) {
		return withManifest(reject(Busy, "every %s worker is busy", m.Lane), m)
	}
	return Decision{Accepted: true, Manifest: m, UsesUnbatchedAllowance: unbatched, UsesBatchLeaf: batched}
}

func withManifest(d Decision, m kind.Manifest) Decision {
	d.Manifest = m
	return d
}
