package server

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/jackc/pgx/v5/pgxpool"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/better-compute/commands/controlplane/commands/queue"
	"github.com/better-compute/commands/internal/backoff"
	"github.com/better-compute/commands/internal/trust"
	agentv1 "github.com/better-compute/commands/proto/bc/agent/v1"
)

// nodeSessions closes a deleted node's gateway sessions. The gateway refuses
// a deleted node a new session (its row is gone from the session start);
// a session already open would otherwise live on, its certificate still
// valid, until the node disconnected. Every session stream passes through
// its interceptor, which gives the stream a context it can cancel by node
// id; a listener on queue.NodeDeletedChannel cancels those of each deleted
// node, on whichever replica holds them, and after a reconnect of the
// listener, which may have missed a deletion, it checks every node it holds.
type nodeSessions struct {
	pool   *pgxpool.Pool
	queue  *queue.Queue
	logger hclog.Logger

	// lock guards open.
	lock sync.Mutex
	open map[string]map[*heldSession]struct{}
}

// heldSession is one open session stream.
type heldSession struct {
	cancel context.CancelCauseFunc
}

// errNodeDeleted is the cause of a session closed for its node's deletion.
var errNodeDeleted = errors.New("node deleted")

func newNodeSessions(pool *pgxpool.Pool, q *queue.Queue, logger hclog.Logger) *nodeSessions {
	return &nodeSessions{pool: pool, queue: q, logger: logger.Named("node_sessions"), open: map[string]map[*heldSession]struct{}{}}
}

// interceptor holds each Session stream under its node's id, read from the
// verified node certificate the gateway reads too; a stream without one is
// left to the gateway, which refuses it.
func (n *nodeSessions) interceptor() grpc.StreamServerInterceptor {
	connect := "/" + agentv1.Session_ServiceDesc.ServiceName + "/"
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		if len(info.FullMethod) < len(connect) || info.FullMethod[:len(connect)] != connect {
			return handler(srv, ss)
		}
		nodeID, ok := certNode(ss.Context())
		if !ok {
			return handler(srv, ss)
		}
		ctx, cancel := context.WithCancelCause(ss.Context())
		defer cancel(nil)
		h := &heldSession{cancel: cancel}
		n.add(nodeID, h)
		defer n.remove(nodeID, h)
		err := handler(srv, &ctxStream{ServerStream: ss, ctx: ctx})
		if errors.Is(context.Cause(ctx), errNodeDeleted) {
			return status.Errorf(codes.NotFound, "node %s was deleted", nodeID)
		}
		return err
	}
}

// certNode is the node id of the stream's verified client certificate.
func certNode(ctx context.Context) (string, bool) {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return "", false
	}
	ti, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok || len(ti.State.VerifiedChains) == 0 || len(ti.State.VerifiedChains[0]) == 0 {
		return "", false
	}
	id, err := trust.IdentityOf(ti.State.VerifiedChains[0][0])
	if err != nil {
		return "", false
	}
	return id.NodeID, true
}

type ctxStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *ctxStream) Context() context.Context { return s.ctx }

func (n *nodeSessions) add(nodeID string, h *heldSession) {
	n.lock.Lock()
	defer n.lock.Unlock()
	if n.open[nodeID] == nil {
		n.open[nodeID] = map[*heldSession]struct{}{}
	}
	n.open[nodeID][h] = struct{}{}
}

func (n *nodeSessions) remove(nodeID string, h *heldSession) {
	n.lock.Lock()
	defer n.lock.Unlock()
	delete(n.open[nodeID], h)
	if len(n.open[nodeID]) == 0 {
		delete(n.open, nodeID)
	}
}

// close ends nodeID's sessions.
func (n *nodeSessions) close(nodeID string) {
	n.lock.Lock()
	defer n.lock.Unlock()
	if len(n.open[nodeID]) == 0 {
		return
	}
	n.logger.Info("closing the sessions of a deleted node", "node_id", nodeID, "sessions", len(n.open[nodeID]))
	for h := range n.open[nodeID] {
		h.cancel(errNodeDeleted)
	}
}

func (n *nodeSessions) held() []string {
	n.lock.Lock()
	defer n.lock.Unlock()
	out := make([]string, 0, len(n.open))
	for id := range n.open {
		out = append(out, id)
	}
	return out
}

// run listens for node deletions until ctx ends, reconnecting with a
// backoff; each (re)connect first closes the sessions of nodes deleted
// while it was not listening.
func (n *nodeSessions) run(ctx context.Context) {
	backoff.Loop(ctx, 100*time.Millisecond, 5*time.Second, n.listenOnce, func(err error, wait time.Duration) {
		n.logger.Debug("node deletion listener lost; reconnecting", "error", err, "backoff", wait)
	})
}

func (n *nodeSessions) listenOnce(ctx context.Context) (listened bool, err error) {
	conn, err := n.pool.Acquire(ctx)
	if err != nil {
		return false, fmt.Errorf("acquiring the listener's connection: %w", err)
	}
	// A connection that LISTENs never goes back to the pool.
	pc := conn.Hijack()
	defer pc.Close(context.Background())
	if err := queue.ListenNodeDeleted(ctx, pc); err != nil {
		return false, err
	}
	deleted, err := n.queue.DeletedNodes(ctx, pc, n.held())
	if err != nil {
		return true, err
	}
	for _, id := range deleted {
		n.close(id)
	}
	for {
		id, err := queue.WaitNodeDeleted(ctx, pc)
		if err != nil {
			return true, err
		}
		n.close(id)
	}
}
