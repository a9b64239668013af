package gateway

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/better-compute/commands/controlplane/trust/nodecerts"
	agentv1 "github.com/better-compute/commands/proto/bc/agent/v1"
)

// maxBatch bounds how many queued messages one turn of the loop takes.
const maxBatch = 64

// recvAhead is how far a session's reader runs ahead of its loop: enough
// for a command's acked, running and result to be taken together (and the
// first two not written), small because every idle session holds the
// buffer (24 bytes a slot: at 64 slots, 1.5 KiB of a session's ~90).
const recvAhead = 16

type recvResult struct {
	msg *agentv1.NodeMessage
	err error
}

// run is the session loop: replay, then the node's messages, wake-ups,
// the fallback poll and the retry of held reports, one at a time on this
// goroutine until the stream ends.
func (s *session) run(ctx context.Context) error {
	// Buffered, so the reader runs ahead and a turn of the loop can take a
	// command's queued reports together (see supersededBy).
	recv := make(chan recvResult, recvAhead)
	go func() {
		defer close(recv)
		for {
			m, err := s.stream.Recv()
			select {
			case recv <- recvResult{m, err}:
			case <-ctx.Done():
				return
			}
			if err != nil {
				return
			}
		}
	}()
	// Replay: every non-terminal command in seq order, then what is pending.
	if err := s.sync(ctx); err != nil {
		return err
	}
	if err := s.sendSpec(ctx, s.hello.GetAppliedGeneration()); err != nil {
		return err
	}
	// The session's timer runs only while something needs it
	// (needsTick): an idle session holds none, so 10,000 quiet sessions
	// cost the gateway no wake-ups at all (BenchmarkSessions' idle CPU);
	// what would give one work reaches it as a wake-up.
	tick := time.NewTimer(s.tickEvery())
	defer tick.Stop()
	armed := true
	for {
		switch need := s.needsTick(); {
		case need && !armed:
			tick.Reset(s.tickEvery())
			armed = true
		case !need && armed:
			tick.Stop()
			armed = false
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case r, ok := <-recv:
			if !ok {
				return nil
			}
			if r.err != nil {
				s.logger.Info("session closed", "error", r.err)
				return nil
			}
			batch, closed := drain(recv, r.msg)
			if err := s.messages(ctx, batch); err != nil {
				return err
			}
			if closed {
				return nil
			}
		case <-s.wake.ch:
			if s.wake.shed.Load() {
				s.logger.Info("ending the session to even out the load across gateways")
				return errShed
			}
			if err := s.recheckCert(ctx); err != nil {
				return err
			}
			if s.wake.spec.Swap(false) {
				if err := s.sendSpec(ctx, s.specSent); err != nil {
					return err
				}
			}
			if s.wake.trust.Swap(false) {
				if err := s.refreshTrust(ctx); err != nil {
					return err
				}
			}
			// A wake-up for the trust bundle alone reads nothing: every
			// other reason (a NOTIFY, the sweep, a credit back) sets read.
			if s.wake.read.Swap(false) || !s.replayed {
				if err := s.sync(ctx); err != nil {
					return err
				}
			}
		case <-s.held.due():
			if err := s.retryHeld(ctx); err != nil {
				return err
			}
		case <-tick.C:
			armed = false
			s.wake.ticks.Add(1)
			// What a wake-up left for want of the database is tried
			// again (needsTick kept the timer for it).
			if err := s.recheckCert(ctx); err != nil {
				return err
			}
			s.wake.trust.Store(false)
			if err := s.refreshTrust(ctx); err != nil {
				return err
			}
			if err := s.flushProgress(ctx); err != nil {
				return err
			}
			if s.specDue {
				if err := s.sendSpec(ctx, s.specSent); err != nil {
					return err
				}
			}
			if s.replayed && s.wake.idle.Load() {
				continue // the gateway's sweep stands in for its poll (sweepIdle)
			}
			if err := s.sync(ctx); err != nil {
				return err
			}
		}
	}
}

// messages handles one batch of the node's messages in order. A report that
// a later one of the same command supersedes is not written; it is
// acknowledged together with the one that supersedes it, once that is
// stored.
func (s *session) messages(ctx context.Context, batch []*agentv1.NodeMessage) error {
	covers := map[int][]*agentv1.CommandUpdate{}
	for i, m := range batch {
		u := m.GetUpdate()
		if u == nil {
			if err := s.handle(ctx, m); err != nil {
				return err
			}
			continue
		}
		if j := supersededBy(batch, i); j >= 0 {
			covers[j] = append(append(covers[j], covers[i]...), u)
			delete(covers, i)
			continue
		}
		if err := s.report(ctx, report{update: u, covers: covers[i]}); err != nil {
			return err
		}
		delete(covers, i)
	}
	return nil
}

// handle handles a message that is not a report.
func (s *session) handle(ctx context.Context, m *agentv1.NodeMessage) error {
	switch msg := m.Msg.(type) {
	case *agentv1.NodeMessage_SpecRequest:
		return s.sendSpec(ctx, msg.SpecRequest.GetHaveGeneration())
	case *agentv1.NodeMessage_Status:
		return s.status(ctx, msg.Status)
	case *agentv1.NodeMessage_AllocationBound:
		return s.allocationBound(ctx, msg.AllocationBound)
	case *agentv1.NodeMessage_SecretRequest:
		return s.secretRequest(ctx, msg.SecretRequest)
	case *agentv1.NodeMessage_Hello:
		return status.Error(codes.InvalidArgument, "Hello may only open a session")
	}
	return nil
}

// needsTick reports whether the session has work on a timer: a read to
// repeat (the first, or one that left a pending command it did not send or
// a cancel to resend), throttled progress to write, a spec push to try
// again, or a certificate check or trust bundle read that the database did
// not answer. Nothing else does: a new command, a cancel request, a spec, a
// certificate change and a newer trust bundle arrive as wake-ups (the
// hub's NOTIFY listener, the gateway's trust watch), and a lost NOTIFY is
// the gateway's sweep's to find (sweepIdle).
func (s *session) needsTick() bool {
	return !s.replayed || !s.wake.idle.Load() || len(s.progressDue) > 0 || s.specDue ||
		s.wake.certs.Load() || s.wake.trust.Load()
}

// recheckCert checks the session's certificate again when a wake-up said
// the node's certificates changed: an error ends the session when the
// certificate was superseded or revoked; when the database could not
// answer, the check waits for the next tick (needsTick).
func (s *session) recheckCert(ctx context.Context) error {
	if !s.wake.certs.Swap(false) {
		return nil
	}
	err := s.g.checkCert(ctx, s.id.NodeID, s.cert)
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		s.logger.Warn("closing the session: its certificate no longer works", "serial", nodecerts.Serial(s.cert), "error", err)
		return err
	}
	s.wake.certs.Store(true)
	return nil
}

func (s *session) tickEvery() time.Duration {
	d := s.g.opts.Poll
	if s.g.opts.CancelResend < d {
		d = s.g.opts.CancelResend
	}
	// Jitter spreads thousands of sessions' polls.
	return d + time.Duration(rand.Int64N(int64(d/4)+1))
}

func (s *session) send(m *agentv1.GatewayMessage) error {
	if err := s.stream.Send(m); err != nil {
		return fmt.Errorf("sending to node %s: %w", s.id.NodeID, err)
	}
	return nil
}

// drain takes first and whatever else the node has already sent, without
// waiting; closed reports that the stream ended among them.
func drain(recv <-chan recvResult, first *agentv1.NodeMessage) (batch []*agentv1.NodeMessage, closed bool) {
	batch = append(batch, first)
	for len(batch) < maxBatch {
		select {
		case r, ok := <-recv:
			if !ok || r.err != nil {
				return batch, true
			}
			batch = append(batch, r.msg)
		default:
			return batch, false
		}
	}
	return batch, false
}
