package fakedaemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	agentv1 "github.com/better-compute/commands/proto/bc/agent/v1"
)

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
