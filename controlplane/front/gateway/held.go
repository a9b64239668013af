package gateway

import (
	"context"
	"time"

	"github.com/better-compute/commands/internal/backoff"
	agentv1 "github.com/better-compute/commands/proto/bc/agent/v1"
)

// The retry of held reports backs off from heldRetryMin to heldRetryMax
// while the database stays away; maxHeld bounds what one session holds.
// Past it a report is neither held nor acknowledged: the node keeps it and
// resends it.
const (
	heldRetryMin = 100 * time.Millisecond
	heldRetryMax = 2 * time.Second
	maxHeld      = 1024
)

// held keeps what a session could not store because the database was
// unreachable: its reports in arrival order, and the latest NodeStatus. The
// session retries them on a timer with a backoff and acknowledges each
// report once it is stored, so a result that arrives during an outage lands
// when the database returns, in the same session.
type held struct {
	reports []report
	status  *agentv1.NodeStatus
	timer   *time.Timer
	// wait backs the retries off from heldRetryMin to heldRetryMax; nil
	// while nothing is held.
	wait *backoff.Exponential
}

// waiting reports whether reports wait for the database.
func (h *held) waiting() bool { return len(h.reports) > 0 }

// due is the retry timer's channel; nil (never ready) when nothing is held.
func (h *held) due() <-chan time.Time {
	if h.timer == nil {
		return nil
	}
	return h.timer.C
}

// arm schedules the next retry, backing off from the last one.
func (h *held) arm() {
	if h.wait == nil {
		h.wait = backoff.New(heldRetryMin, heldRetryMax)
	}
	next := h.wait.NextBackOff()
	if h.timer == nil {
		h.timer = time.NewTimer(next)
		return
	}
	h.timer.Reset(next)
}

// stop drops the timer once nothing is held (and when the session ends).
func (h *held) stop() {
	if h.timer != nil {
		h.timer.Stop()
		h.timer = nil
	}
	h.wait = nil
}

// holdReport keeps r for a retry. A report the node sent again while the
// first copy waits is kept once: the first copy's ack answers both.
func (s *session) holdReport(r report) {
	u := r.update
	for _, o := range s.held.reports {
		if same(o.update, u) {
			return
		}
	}
	if len(s.held.reports) >= maxHeld {
		s.logger.Debug("too many reports held; the node keeps this one", "command_id", u.GetCommandId())
		return
	}
	s.held.reports = append(s.held.reports, r)
	s.g.outage.Count(reportsHeld)
	s.logger.Debug("report held until the database returns", "command_id", u.GetCommandId(), "state", u.GetState(), "update_seq", u.GetUpdateSeq())
	if s.held.timer == nil {
		s.held.arm()
	}
}

// same reports whether a and b are one update of the node (a resend).
func same(a, b *agentv1.CommandUpdate) bool {
	return a.GetCommandId() == b.GetCommandId() && a.GetUpdateSeq() == b.GetUpdateSeq() &&
		a.GetState() == b.GetState() && a.GetRejectCode() == b.GetRejectCode()
}

// retryHeld stores what is held, in order, acknowledging each report once
// it is stored; it stops at the first that still finds the database away
// and tries again after the backoff.
func (s *session) retryHeld(ctx context.Context) error {
	for len(s.held.reports) > 0 {
		r := s.held.reports[0]
		out, err := s.land(ctx, r.update)
		if err != nil {
			return err
		}
		if out == retry {
			s.held.arm()
			return nil
		}
		s.held.reports[0] = report{}
		s.held.reports = s.held.reports[1:]
		if out == refused {
			// What it superseded lands on its own, next, in the node's order.
			front := make([]report, 0, len(r.covers)+len(s.held.reports))
			for _, u := range r.covers {
				front = append(front, report{update: u})
			}
			s.held.reports = append(front, s.held.reports...)
			continue
		}
		if err := s.ack(r); err != nil {
			return err
		}
	}
	if st := s.held.status; st != nil {
		s.held.status = nil
		if err := s.status(ctx, st); err != nil {
			return err
		}
		if s.held.status != nil {
			s.held.arm()
			return nil
		}
	}
	s.held.stop()
	return nil
}
