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
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/better-compute/commands/sdk/kind"
	"io"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

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

// SecretResponses returns every SecretResponse the gateway sent so far.
func (d *Daemon) SecretResponses() []*agentv1.SecretResponse {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]*agentv1.SecretResponse(nil), d.secretResponses...)
}

// Received returns every command delivered so far, duplicates included.
func (d *Daemon) Received() []*agentv1.Command {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]*agentv1.Command(nil), d.received...)
}

// Runs reports how often the fake ran command id (duplicates answered from
// the journal do not count).
func (d *Daemon) Runs(id string) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.runs[id]
}

// Cancels returns the ids of the Cancel messages received.
func (d *Daemon) Cancels() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]string(nil), d.cancels...)
}

// Acks reports how many of its updates for command id the gateway
// acknowledged: an acknowledged update was processed, landed or fenced.
func (d *Daemon) Acks(id string) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.acks[id]
}

// Specs returns the Spec messages received, in order.
func (d *Daemon) Specs() []*agentv1.Spec {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]*agentv1.Spec(nil), d.specs...)
}

// Welcome returns the last Welcome.
func (d *Daemon) Welcome() *agentv1.Welcome {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.welcome
}

// ErrCrashed is returned by Run when the context ended the session, as a crash.
var ErrCrashed = errors.New("fake daemon crashed")

// Run holds one session over conn until ctx ends (a crash: the stream is cut
// without a goodbye) or the gateway closes it.
func (d *Daemon) Run(ctx context.Context, conn grpc.ClientConnInterface) error {
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := agentv1.NewSessionClient(conn).Connect(sctx)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	d.mu.Lock()
	hello := &agentv1.Hello{NodeId: d.NodeID, JournalId: d.JournalID, BootId: d.BootID, Role: d.Role, DaemonVersion: "fake", Kinds: d.Kinds, AppliedGeneration: d.AppliedGeneration}
	for id := range d.running {
		hello.InFlight = append(hello.InFlight, id)
	}
	d.mu.Unlock()
	// sendLock serialises sends from the command goroutines.
	var sendLock sync.Mutex
	send := func(m *agentv1.NodeMessage) error {
		sendLock.Lock()
		defer sendLock.Unlock()
		return stream.Send(m)
	}
	if err := send(&agentv1.NodeMessage{Msg: &agentv1.NodeMessage_Hello{Hello: hello}}); err != nil {
		return fmt.Errorf("hello: %w", err)
	}
	if d.Status != nil {
		if err := send(&agentv1.NodeMessage{Msg: &agentv1.NodeMessage_Status{Status: d.Status}}); err != nil {
			return fmt.Errorf("status: %w", err)
		}
	}
	for _, m := range d.AfterHello {
		if err := send(m); err != nil {
			return fmt.Errorf("after hello: %w", err)
		}
	}
	if d.RequestSpec {
		if err := send(&agentv1.NodeMessage{Msg: &agentv1.NodeMessage_SpecRequest{SpecRequest: &agentv1.SpecRequest{HaveGeneration: d.AppliedGeneration}}}); err != nil {
			return fmt.Errorf("spec request: %w", err)
		}
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	for {
		msg, err := stream.Recv()
		if err != nil {
			if ctx.Err() != nil {
				return ErrCrashed
			}
			if errors.Is(err, io.EOF) {
				return nil
			}
			return fmt.Errorf("recv: %w", err)
		}
		switch m := msg.Msg.(type) {
		case *agentv1.GatewayMessage_Welcome:
			d.mu.Lock()
			d.welcome = m.Welcome
			hook := d.OnWelcome
			// As bcd does, a new session resends every terminal report the
			// gateway has not acknowledged: the acknowledgement may have
			// died with the last session (its gateway with it). The
			// gateway answers a report it already holds with an ack.
			var resend []*agentv1.CommandUpdate
			for id := range d.terminalSeq {
				if u, ok := d.journal[id]; ok {
					resend = append(resend, proto.Clone(u).(*agentv1.CommandUpdate))
				}
			}
			d.mu.Unlock()
			if hook != nil {
				hook(m.Welcome)
			}
			for _, u := range resend {
				if err := send(&agentv1.NodeMessage{Msg: &agentv1.NodeMessage_Update{Update: u}}); err != nil {
					return fmt.Errorf("resending the report of %s: %w", u.GetCommandId(), err)
				}
			}
		case *agentv1.GatewayMessage_Command:
			var cmd agentv1.Command
			if err := proto.Unmarshal(m.Command.GetCommand(), &cmd); err != nil {
				return fmt.Errorf("command envelope: %w", err)
			}
			epoch := m.Command.GetSessionEpoch()
			env := m.Command
			d.mu.Lock()
			d.envelopes = append(d.envelopes, env)
			d.mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				d.handle(sctx, &cmd, env, epoch, send)
			}()
		case *agentv1.GatewayMessage_Spec:
			d.mu.Lock()
			d.specs = append(d.specs, m.Spec)
			d.mu.Unlock()
		case *agentv1.GatewayMessage_Ack:
			id := m.Ack.GetCommandId()
			d.mu.Lock()
			d.acks[id]++
			var hook func(string)
			// An acknowledgement covers its command's updates up to its seq.
			if ts, ok := d.terminalSeq[id]; ok && m.Ack.GetUpdateSeq() >= ts {
				delete(d.terminalSeq, id)
				hook = d.onTerminalAck
			}
			d.mu.Unlock()
			if hook != nil {
				hook(id)
			}
		case *agentv1.GatewayMessage_SecretResponse:
			d.mu.Lock()
			d.secretResponses = append(d.secretResponses, m.SecretResponse)
			d.mu.Unlock()
		case *agentv1.GatewayMessage_Cancel:
			d.mu.Lock()
			d.cancels = append(d.cancels, m.Cancel.GetCommandId())
			if c, ok := d.running[m.Cancel.GetCommandId()]; ok {
				c()
			}
			d.mu.Unlock()
		}
	}
}

// Envelopes returns every command envelope received, as received.
func (d *Daemon) Envelopes() []*agentv1.CommandEnvelope {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]*agentv1.CommandEnvelope(nil), d.envelopes...)
}

func (d *Daemon) handle(ctx context.Context, cmd *agentv1.Command, env *agentv1.CommandEnvelope, epoch int64, send func(*agentv1.NodeMessage) error) {
	update := func(u *agentv1.CommandUpdate) {
		u.CommandId = cmd.GetId()
		u.SessionEpoch = epoch
		d.mu.Lock()
		if u.UpdateSeq == 0 {
			u.UpdateSeq = d.nextSeq(cmd.GetId())
		}
		if stateTerminal(u.GetState()) && u.GetRejectCode() != agentv1.RejectCode_REJECT_CODE_BUSY {
			d.terminalSeq[cmd.GetId()] = u.UpdateSeq
		}
		d.mu.Unlock()
		_ = send(&agentv1.NodeMessage{Msg: &agentv1.NodeMessage_Update{Update: u}})
	}
	d.mu.Lock()
	d.received = append(d.received, cmd)
	hook := d.onCommand
	if stored, ok := d.journal[cmd.GetId()]; ok {
		d.mu.Unlock()
		if hook != nil {
			hook(cmd)
		}
		update(proto.Clone(stored).(*agentv1.CommandUpdate))
		return
	}
	if _, ok := d.running[cmd.GetId()]; ok {
		// Re-attach: the command runs already; its outcome will be reported.
		d.mu.Unlock()
		if hook != nil {
			hook(cmd)
		}
		return
	}
	script := d.Script
	if d.Verify != nil {
		if err := d.Verify(env); err != nil {
			u := &agentv1.CommandUpdate{CommandId: cmd.GetId(), State: agentv1.CommandState_COMMAND_STATE_REJECTED,
				RejectCode: agentv1.RejectCode_REJECT_CODE_BAD_SIGNATURE, Reason: "BAD_SIGNATURE", Message: err.Error(),
				UpdateSeq: d.nextSeq(cmd.GetId())}
			d.journal[cmd.GetId()] = u
			d.mu.Unlock()
			if hook != nil {
				hook(cmd)
			}
			update(proto.Clone(u).(*agentv1.CommandUpdate))
			return
		}
	}
	attest := d.Attest
	// Reserve the id so that a concurrent duplicate re-attaches; the script
	// runs outside the lock, since it may block (tests hold it on purpose).
	runCtx, cancel := context.WithCancel(ctx)
	d.running[cmd.GetId()] = cancel
	d.mu.Unlock()
	act := Action{Kind: Succeed}
	if script != nil {
		act = script(cmd)
	}
	d.mu.Lock()
	if act.Kind == Reject || act.Kind == Ignore {
		delete(d.running, cmd.GetId())
	} else {
		d.runs[cmd.GetId()]++
	}
	d.mu.Unlock()
	if hook != nil {
		hook(cmd)
	}
	finish := func(u *agentv1.CommandUpdate) {
		if len(u.Result) > 0 {
			sum := sha256.Sum256(u.Result)
			u.ResultSha256 = sum[:]
		}
		if attest != nil {
			u.CommandId = cmd.GetId()
			attest(env.GetCommand(), u)
		}
		d.mu.Lock()
		delete(d.running, cmd.GetId())
		// Numbered before it is journaled: a replay resends the same seq.
		u.UpdateSeq = d.nextSeq(cmd.GetId())
		if u.GetRejectCode() != agentv1.RejectCode_REJECT_CODE_BUSY {
			d.journal[cmd.GetId()] = u
		}
		d.mu.Unlock()
		update(proto.Clone(u).(*agentv1.CommandUpdate))
	}
	switch act.Kind {
	case Ignore:
		cancel()
		return
	case Reject:
		cancel()
		finish(&agentv1.CommandUpdate{State: agentv1.CommandState_COMMAND_STATE_REJECTED, RejectCode: act.Code, Reason: act.Code.String()})
		return
	}
	defer cancel()
	if act.Kind != SkipToResult {
		update(&agentv1.CommandUpdate{State: agentv1.CommandState_COMMAND_STATE_ACKED})
		update(&agentv1.CommandUpdate{State: agentv1.CommandState_COMMAND_STATE_RUNNING})
	}
	for i := 1; i <= act.Steps; i++ {
		if act.StepEvery > 0 && i > 1 {
			select {
			case <-time.After(act.StepEvery):
			case <-runCtx.Done():
			}
		}
		update(&agentv1.CommandUpdate{State: agentv1.CommandState_COMMAND_STATE_RUNNING, ProgressPercent: int32(i * 100 / act.Steps),
			ProgressMessage: fmt.Sprintf("step %d of %d", i, act.Steps)})
	}
	if act.Kind == Hang {
		<-runCtx.Done()
		if ctx.Err() != nil {
			// The session ended: the fake forgets the run, as a daemon that
			// restarted would; a replay starts it again.
			d.mu.Lock()
			delete(d.running, cmd.GetId())
			d.mu.Unlock()
			return
		}
		finish(&agentv1.CommandUpdate{State: agentv1.CommandState_COMMAND_STATE_CANCELLED, Reason: kind.ReasonCancelled})
		return
	}
	if act.Delay > 0 {
		t := time.NewTimer(act.Delay)
		select {
		case <-t.C:
		case <-runCtx.Done():
			t.Stop()
			if ctx.Err() != nil {
				d.mu.Lock()
				delete(d.running, cmd.GetId())
				d.mu.Unlock()
				return
			}
			finish(&agentv1.CommandUpdate{State: agentv1.CommandState_COMMAND_STATE_CANCELLED, Reason: kind.ReasonCancelled})
			return
		}
	}
	if act.Kind == Fail {
		finish(&agentv1.CommandUpdate{State: agentv1.CommandState_COMMAND_STATE_FAILED, Reason: act.Reason, Result: act.Result})
		return
	}
	res := act.Result
	if res == nil {
		res = json.RawMessage(`{"ok":true}`)
	}
	finish(&agentv1.CommandUpdate{State: agentv1.CommandState_COMMAND_STATE_SUCCEEDED, Result: res})
}

// stateTerminal reports whether st ends a command.
func stateTerminal(st agentv1.CommandState) bool {
	switch st {
	case agentv1.CommandState_COMMAND_STATE_SUCCEEDED, agentv1.CommandState_COMMAND_STATE_FAILED,
		agentv1.CommandState_COMMAND_STATE_REJECTED, agentv1.CommandState_COMMAND_STATE_EXPIRED,
		agentv1.CommandState_COMMAND_STATE_CANCELLED:
		return true
	}
	return false
}
