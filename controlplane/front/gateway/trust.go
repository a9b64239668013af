package gateway

import (
	"context"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	agentv1 "github.com/better-compute/commands/proto/bc/agent/v1"
)

// refreshTrust sends an open session another Welcome (same epoch) when a
// newer trust bundle was published since its last one, so that nodes take a
// rotation's bundle while they stay online. The source caches, so this costs
// a read per cache period per process, not per session.
func (s *session) refreshTrust(ctx context.Context) error {
	if s.g.opts.TrustBundle == nil {
		return nil
	}
	// A failed read hands back the last bundle read, which is still good to
	// send; with none, the next tick reads again (needsTick).
	tb, err := s.g.opts.TrustBundle.Current(ctx)
	if err != nil && tb == nil {
		s.wake.trust.Store(true)
		return nil
	}
	if tb == nil || tb.GetVersion() <= s.trustSent {
		return nil
	}
	s.logger.Info("sending the node a newer trust bundle", "trust_version", tb.GetVersion(), "previous", s.trustSent)
	if err := s.send(&agentv1.GatewayMessage{Msg: &agentv1.GatewayMessage_Welcome{Welcome: &agentv1.Welcome{
		ServerTime: timestamppb.New(s.g.opts.Now()), SessionEpoch: s.epoch, TrustBundle: tb,
	}}}); err != nil {
		return err
	}
	s.trustSent = tb.GetVersion()
	return nil
}

// watchTrust reads the newest trust bundle every Poll until ctx ends and,
// when a newer one was published, wakes every session to send it
// (refreshTrust): one read a period for the whole gateway, where each idle
// session used to look on a timer of its own.
func (g *Gateway) watchTrust(ctx context.Context) {
	if g.opts.TrustBundle == nil {
		return
	}
	var seen int64
	if tb, err := g.opts.TrustBundle.Current(ctx); err == nil {
		seen = tb.GetVersion()
	}
	t := time.NewTicker(g.opts.Poll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		tb, err := g.opts.TrustBundle.Current(ctx)
		if err != nil || tb.GetVersion() <= seen {
			continue // a failed read: the next period tries again
		}
		seen = tb.GetVersion()
		g.logger.Info("a newer trust bundle was published; sending it to every session", "trust_version", seen)
		g.hub.wakeTrust()
	}
}
