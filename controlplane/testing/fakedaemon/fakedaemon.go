// Package fakedaemon is the node side of the session protocol in Go, for the
// control plane's tests and the fleet simulator. It is scriptable: per command
// it can accept and succeed, fail, reject with a code, hang, or report BUSY;
// across sessions it can crash, lose its journal (a new journal id) or reboot
// (a new boot id). It is not bcd: it runs no plugins and keeps no journal on
// disk, but it answers a duplicate delivery from its in-memory journal as bcd
// does, and it never runs a command twice unless told to.
package fakedaemon

import (
	"context"
	"encoding/json"
	"sync"
	"time"

	agentv1 "github.com/better-compute/commands/proto/bc/agent/v1"
)

// ActionKind is what the fake does with a command.
type ActionKind int

// The scripted outcomes.
const (
	// Succeed acks, runs and reports succeeded with Result.
	Succeed ActionKind = iota
	// Fail acks, runs and reports failed with Reason.
	Fail
	// Reject reports rejected with Code (BUSY puts it back to pending).
	Reject
	// Hang acks and reports running, then nothing until cancelled.
	Hang
	// Ignore reports nothing at all (a lost ack).
	Ignore
	// SkipToResult reports the terminal state without acked or running.
	SkipToResult
)

// Action is the script's answer for one command.
type Action struct {
	Kind   ActionKind
	Code   agentv1.RejectCode
	Reason string
	Result json.RawMessage
	// Delay is waited before the outcome is reported (after running).
	Delay time.Duration
	// Steps are progress reports sent after running, StepEvery apart
	// (back to back when zero), before the Delay and the outcome.
	Steps     int
	StepEvery time.Duration
}

// Script decides per command; nil means Succeed for everything.
type Script func(cmd *agentv1.Command) Action

// Daemon is one fake node.
type Daemon struct {
	NodeID    string
	Role      string
	JournalID string
	BootID    string
	Kinds     []*agentv1.KindDigest
	Script    Script
	// Status, when set, is sent right after Hello (inventory, conditions).
	Status *agentv1.NodeStatus
	// AppliedGeneration is the spec generation reported in Hello.
	AppliedGeneration int64
	// RequestSpec sends a SpecRequest right after Hello.
	RequestSpec bool
	// AfterHello are sent right after Hello (and Status): an
	// AllocationBound, say.
	AfterHello []*agentv1.NodeMessage
	// Verify, when set, is check 4: an envelope it refuses is rejected
	// BAD_SIGNATURE (and journaled), never run, whatever its kind.
	Verify func(env *agentv1.CommandEnvelope) error
	// OnWelcome, when set, sees every Welcome (the first, and those that
	// bring a newer trust bundle).
	OnWelcome func(*agentv1.Welcome)
	// Attest, when set, signs each terminal update of a command (given the
	// command's exact bytes), as bcd does for attested kinds.
	Attest func(commandBytes []byte, u *agentv1.CommandUpdate)

	// mu guards everything below.
	mu              sync.Mutex
	journal         map[string]*agentv1.CommandUpdate // terminal answers by command id
	running         map[string]context.CancelFunc
	received        []*agentv1.Command
	runs            map[string]int
	welcome         *agentv1.Welcome
	cancels         []string
	acks            map[string]int
	specs           []*agentv1.Spec
	secretResponses []*agentv1.SecretResponse
	onCommand       func(*agentv1.Command)
	envelopes       []*agentv1.CommandEnvelope
	// seqs is each command's last update_seq; terminalSeq the seq of its
	// terminal update until the gateway acknowledges it (onTerminalAck).
	seqs          map[string]int64
	terminalSeq   map[string]int64
	onTerminalAck func(commandID string)
}

// New returns a fake node with fresh journal and boot ids.
func New(nodeID string) *Daemon {
	return &Daemon{
		NodeID:    nodeID,
		Role:      "node",
		JournalID: "journal-" + nodeID + "-1",
		BootID:    "boot-" + nodeID + "-1",
		journal:   map[string]*agentv1.CommandUpdate{},
		running:   map[string]context.CancelFunc{},
		runs:      map[string]int{},
		acks:      map[string]int{},
		seqs:      map[string]int64{},

		terminalSeq: map[string]int64{},
	}
}

// LoseJournal forgets everything, as a daemon whose journal file is gone.
func (d *Daemon) LoseJournal() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.journal = map[string]*agentv1.CommandUpdate{}
	d.running = map[string]context.CancelFunc{}
	d.JournalID = d.JournalID + "-lost"
}

// Reboot takes a new boot id for the next session.
func (d *Daemon) Reboot() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.BootID = d.BootID + "-rebooted"
}

// OnCommand sets a hook called for every command received (tests wait on it).
func (d *Daemon) OnCommand(f func(*agentv1.Command)) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.onCommand = f
}

// OnTerminalAck sets a hook called when the gateway acknowledges a
// command's terminal update (again for a terminal update replayed from the
// journal): "UpdateAck tells the node an update is stored", so the command
// is settled in the database by then, unless the session was fenced (a
// fleet simulator times a fan-out's settling by it, and reads the database
// once at the end).
func (d *Daemon) OnTerminalAck(f func(commandID string)) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.onTerminalAck = f
}

// nextSeq is command id's next update_seq, as bcd numbers a command's
// updates; d.mu is held.
func (d *Daemon) nextSeq(id string) int64 {
	d.seqs[id]++
	return d.seqs[id]
}
