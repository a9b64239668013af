package gateway

import (
	"context"
	"crypto/x509"
	"errors"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/better-compute/commands/controlplane/internal/dbhealth"
	"github.com/better-compute/commands/controlplane/internal/errcode"
	"github.com/better-compute/commands/controlplane/trust/nodecerts"
	"github.com/better-compute/commands/internal/trust"
	agentv1 "github.com/better-compute/commands/proto/bc/agent/v1"
	"github.com/better-compute/commands/sdk/kind"
)

// session is one node's stream. Only the session's own goroutine (run)
// touches its fields, so none needs a lock.
type session struct {
	g      *Gateway
	id     trust.Identity
	cert   *x509.Certificate // the session's verified node certificate
	hello  *agentv1.Hello
	epoch  int64
	stream grpc.BidiStreamingServer[agentv1.NodeMessage, agentv1.GatewayMessage]
	logger hclog.Logger
	wake   *waker
	// kinds are the kinds the node's Hello reported (with digest and
	// version); refused the plugin files its bcd refused.
	kinds   map[string]*agentv1.KindDigest
	refused []*agentv1.PluginRefusal

	// outstanding holds the credit of each command the node has been sent
	// and not yet settled; perLane counts them per lane.
	outstanding map[string]credit
	perLane     map[kind.Lane]int
	cancelSent  map[string]time.Time
	specSent    int64
	// trustSent is the trust bundle version the node was last sent; a
	// newer published one goes out in another Welcome.
	trustSent int64
	// mismatchLogged holds the kinds whose manifest mismatch was logged.
	mismatchLogged map[string]bool
	// waitingSaid is what this session last recorded of why each held command
	// waits: a poll that finds the same says nothing to the database.
	waitingSaid map[string]string
	// progressAt is when each running command's progress was last written;
	// progressDue holds the newest step not yet written (throttled).
	progressAt  map[string]time.Time
	progressDue map[string][]byte
	// specDue is set when a spec push failed on the database: the next
	// tick tries again rather than waiting for a new generation.
	specDue  bool
	replayed bool // the session's first read of the open commands succeeded and was replayed
	starved  bool // the last read left a pending command for want of credit; wake.idle says it found none

	// held keeps the reports (and the last status) not yet stored because
	// the database was unreachable, retried until they are.
	held held
}

// credit is what the session holds for one outstanding command.
type credit struct {
	lane kind.Lane
	// attempts is the command's dispatch count, for BUSY's backoff.
	attempts int
}

// identityFromPeer reads the node identity from the verified mTLS client
// certificate: no session without a valid node certificate.
func identityFromPeer(ctx context.Context) (trust.Identity, *x509.Certificate, error) {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return trust.Identity{}, nil, status.Error(codes.Unauthenticated, "no peer: connect with mTLS and a node certificate")
	}
	ti, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok || len(ti.State.VerifiedChains) == 0 || len(ti.State.VerifiedChains[0]) == 0 {
		return trust.Identity{}, nil, status.Error(codes.Unauthenticated, "no verified client certificate: join the node first (bcd join) and connect with its certificate")
	}
	var leaf *x509.Certificate = ti.State.VerifiedChains[0][0]
	id, err := trust.IdentityOf(leaf)
	if err != nil {
		return trust.Identity{}, nil, status.Errorf(codes.Unauthenticated, "client certificate: %v", err)
	}
	return id, leaf, nil
}

// checkCert refuses a certificate that a later join superseded or that
// an operator revoked; unreachable is true when the database could not
// answer.
func (g *Gateway) checkCert(ctx context.Context, nodeID string, cert *x509.Certificate) error {
	err := nodecerts.Check(ctx, g.pool, nodeID, nodecerts.Serial(cert))
	switch {
	case err == nil:
		return nil
	case errors.Is(err, nodecerts.ErrSuperseded), errors.Is(err, nodecerts.ErrRevoked), errors.Is(err, nodecerts.ErrUnknown):
		return status.Errorf(codes.PermissionDenied, "%v", err)
	}
	return err
}

// Connect serves one node's session: Hello, the settling of what the
// reconnect proves, Welcome, then the session loop until the stream ends.
func (g *Gateway) Connect(stream grpc.BidiStreamingServer[agentv1.NodeMessage, agentv1.GatewayMessage]) error {
	ctx := stream.Context()
	id, leaf, err := identityFromPeer(ctx)
	if err != nil {
		return err
	}
	if err := g.checkCert(ctx, id.NodeID, leaf); err != nil {
		if _, ok := status.FromError(err); ok {
			g.logger.Warn("session refused: certificate", "node_id", id.NodeID, "serial", nodecerts.Serial(leaf), "error", err)
			return err
		}
		if ctx.Err() == nil && dbhealth.Transient(err) {
			g.outage.Failed("checking a node certificate", err)
		}
		return status.Errorf(codes.Unavailable, "checking the node certificate: %v", err)
	}
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	hello := first.GetHello()
	if hello == nil {
		return status.Error(codes.InvalidArgument, "the first message of a session must be Hello")
	}
	if hello.GetNodeId() != id.NodeID {
		return status.Errorf(codes.PermissionDenied, "Hello names node %q but the certificate is for %q", hello.GetNodeId(), id.NodeID)
	}
	// The role is the certificate's (the CA recorded it at join); a Hello
	// that claims another cannot change it.
	if hello.GetRole() != "" && hello.GetRole() != id.Role {
		return status.Errorf(codes.PermissionDenied, "Hello claims role %q but the certificate is for role %q: join again for a new role", hello.GetRole(), id.Role)
	}
	epoch, err := g.beginSession(ctx, hello, id.Role)
	if err != nil {
		var qe *errcode.Error
		if errors.As(err, &qe) && qe.Code == errcode.NotFound {
			return status.Errorf(codes.NotFound, "node %s is not registered or was deleted", id.NodeID)
		}
		if ctx.Err() == nil && dbhealth.Transient(err) {
			g.outage.Failed("beginning a session", err)
		}
		return status.Errorf(codes.Unavailable, "beginning the session: %v", err)
	}
	g.outage.OK()
	s := &session{
		g: g, id: id, cert: leaf, hello: hello, epoch: epoch, stream: stream,
		logger:      g.logger.With("node_id", id.NodeID, "epoch", epoch),
		kinds:       map[string]*agentv1.KindDigest{},
		refused:     hello.GetRefusedPlugins(),
		outstanding: map[string]credit{},
		perLane:     map[kind.Lane]int{},
		cancelSent:  map[string]time.Time{},

		mismatchLogged: map[string]bool{},
		waitingSaid:    map[string]string{},
		progressAt:     map[string]time.Time{},
		progressDue:    map[string][]byte{},
	}
	for _, k := range hello.GetKinds() {
		s.kinds[k.GetKind()] = k
	}
	// The node row says the session ended once it did, whatever ended it
	// (unless a newer session superseded it): nodes.get and nodes.list show
	// the node disconnected from then.
	defer g.endSession(ctx, id.NodeID, epoch)
	s.wake = g.hub.register(id.NodeID)
	defer g.hub.unregister(id.NodeID, s.wake)
	defer func() {
		// The session's credits end with it (a new session replays).
		for l, n := range s.perLane {
			g.opts.Observer.Credits(l, -n)
		}
	}()
	defer s.held.stop()
	s.logger.Info("session opened", "journal_id", hello.GetJournalId(), "boot_id", hello.GetBootId(), "role", id.Role)
	var tb *agentv1.TrustBundle
	if g.opts.TrustBundle != nil {
		if tb, err = g.opts.TrustBundle.Current(ctx); err != nil {
			// A failed read hands back the last bundle read; without any,
			// the node keeps the one it holds (a Welcome without a bundle
			// changes nothing on the node).
			s.logger.Warn("reading the trust bundle for Welcome", "error", err)
		}
	}
	if err := s.send(&agentv1.GatewayMessage{Msg: &agentv1.GatewayMessage_Welcome{Welcome: &agentv1.Welcome{
		ServerTime: timestamppb.New(g.opts.Now()), SessionEpoch: epoch, TrustBundle: tb,
	}}}); err != nil {
		return err
	}
	s.trustSent = tb.GetVersion()
	if err := s.recordKinds(ctx); err != nil {
		return err
	}
	return s.run(ctx)
}

// endSessionTimeout bounds recording a session's end, which runs after the
// stream's context ended.
const endSessionTimeout = 5 * time.Second

// endSession records in the node row that the session of epoch ended. A
// failure is logged: the row's session_seen_at then goes stale, which the
// API reads as disconnected too.
func (g *Gateway) endSession(ctx context.Context, nodeID string, epoch int64) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), endSessionTimeout)
	defer cancel()
	if err := g.queue.EndSession(ctx, g.pool, nodeID, epoch); err != nil {
		g.logger.Warn("recording the end of a session", "node_id", nodeID, "epoch", epoch, "error", err)
	}
}
