package gateway

import (
	"context"
	"fmt"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"

	"github.com/better-compute/commands/controlplane/commands/batches"
	"github.com/better-compute/commands/controlplane/commands/queue"
	"github.com/better-compute/commands/controlplane/internal/dbhealth"
	agentv1 "github.com/better-compute/commands/proto/bc/agent/v1"
	"github.com/better-compute/commands/sdk/kind"
)

// sync reads the node's open commands and does what they need: the replay
// of every in-flight command in seq order (until one read of the session
// has succeeded), dispatch of pending ones within credits, and Cancel for
// in-flight commands whose cancel was requested.
func (s *session) sync(ctx context.Context) error {
	// Until this read's work is done the session polls: a read or a
	// dispatch that the database cut short is tried again on the next tick.
	s.wake.idle.Store(false)
	open, err := s.g.lister.listOpen(ctx, s.id.NodeID)
	if err != nil {
		return s.dbErr(ctx, "reading open commands", err)
	}
	s.g.outage.OK()
	replay := !s.replayed
	s.replayed = true
	s.starved = false
	now := s.g.opts.Now()
	openIDs := make(map[string]bool, len(open))
	for _, c := range open {
		openIDs[c.ID] = true
	}
	// Commands settled elsewhere (the sweeper, a reconnect) give their credit back.
	for id := range s.outstanding {
		if !openIDs[id] {
			s.releaseCredit(id)
		}
	}
	for _, c := range open {
		switch c.State {
		case queue.Dispatched, queue.Acked, queue.Running:
			_, credited := s.outstanding[c.ID]
			// Past the replay, an open command of this session's epoch
			// that it holds no credit for was marked dispatched by this
			// session in a write whose commit it never heard back from (a
			// connection lost in COMMIT, a failover): the commit landed and
			// the send never happened. It goes out now; the node's journal
			// answers a copy it already has.
			lost := !replay && !credited && c.DispatchedEpoch == s.epoch
			if lost {
				s.logger.Info("sending a command whose dispatch committed unanswered", "command_id", c.ID, "kind", c.Kind)
			}
			if replay || lost {
				if err := s.sendCommand(ctx, c); err != nil {
					return err
				}
				s.takeCredit(c)
			}
			if err := s.resendCancel(c, now); err != nil {
				return err
			}
		case queue.Pending:
			if err := s.dispatch(ctx, c, now); err != nil {
				return err
			}
		}
	}
	s.wake.idle.Store(s.waitsForWake(open))
	return nil
}

// waitsForWake reports whether a session that has done what its read
// found open asked for may wait for a wake-up instead of polling: nothing
// in open needs it on a timer. A pending command it did not send may come
// due (not_before, a BUSY backoff) or wait for a credit, and an in-flight
// command whose cancel was requested gets Cancel again every CancelResend;
// a command in flight (one it just sent included) only waits for its
// node's report. Whatever else would give the session work (a new command, a
// cancel request, a requeue, a spec, an approval) arrives as a wake-up
// (bc_dispatch), and the gateway's sweep (sweepIdle) catches a lost one
// within IdlePoll. Sessions whose commands were in flight used to poll
// every Poll: during a fan-out to 19,500 nodes that was 12,000 reads of
// open commands, 36 s of the database's time, and the fan-out's time grew
// with the square of its size (BenchmarkSessions).
func (s *session) waitsForWake(open []queue.Command) bool {
	for _, c := range open {
		if _, sent := s.outstanding[c.ID]; c.State == queue.Pending && !sent {
			return false
		}
		if c.CancelRequestedAt != nil {
			return false
		}
	}
	return true
}

// dispatch sends a pending command that is due, within its lane's credits,
// to a node that runs the registry's manifest of its kind and whose
// certificate allows it.
func (s *session) dispatch(ctx context.Context, c queue.Command, now time.Time) error {
	if c.NextAttemptAt != nil && c.NextAttemptAt.After(now) {
		return nil
	}
	if c.NotBefore != nil && c.NotBefore.After(now) {
		return nil
	}
	if c.AwaitingApproval {
		return nil // its batch waits for approvals; the approval wakes the session
	}
	if !c.NotAfter.After(now) {
		return nil // the sweeper expires it
	}
	if s.perLane[c.Lane] >= s.g.opts.Credits[c.Lane] {
		s.starved = true
		return nil // no credit: it stays pending until one returns
	}
	// Where the node runs the kind, or why its commands wait for a
	// person (said on the command in the API, after the refusals below,
	// which end the command rather than hold it).
	version, blocked := s.route(c.Kind)
	// "The gateway checks the session's certificate again at dispatch."
	if !s.id.Allows(c.Kind) {
		_, _, err := s.g.queue.Transition(ctx, s.g.pool, queue.Transition{
			CommandID: c.ID, NodeID: s.id.NodeID, To: queue.Rejected, Reason: "UNSUPPORTED", Message: "runs a restricted identity that does not accept " + c.Kind,
		})
		return s.dbErr(ctx, "rejecting a kind the certificate does not allow", err)
	}
	// "the control plane routes by [the role allowlists]": a kind goes only
	// to a session whose certificate's role its manifest names (the queue
	// refuses it at enqueue for the node's recorded role; the certificate
	// may have changed since). The node would refuse it UNSUPPORTED anyway.
	if m, ok := s.manifestFor(c.Kind, version); ok && !m.AllowsRole(s.role()) {
		_, _, err := s.g.queue.Transition(ctx, s.g.pool, queue.Transition{
			CommandID: c.ID, NodeID: s.id.NodeID, To: queue.Rejected, Reason: "UNSUPPORTED",
			Message: fmt.Sprintf("%s runs only on role %s; this node's certificate is for role %s", c.Kind, strings.Join(m.Roles, " or "), s.role()),
		})
		return s.dbErr(ctx, "rejecting a kind the node's role does not run", err)
	}
	if blocked != nil {
		return s.hold(ctx, c, blocked)
	}
	// A batched command's approval and proof are read before it is marked
	// dispatched: a database that cannot answer leaves it pending, to go
	// out whole on a later poll, never without them (the node would refuse
	// it BATCH_UNAPPROVED for good).
	extras, err := s.batchExtras(ctx, c)
	if err != nil {
		if !dbhealth.Transient(err) {
			// Not an outage: say why it waits in the API, not only here.
			if _, werr := s.g.queue.SetWaiting(ctx, s.g.pool, s.id.NodeID, c.ID, ReasonBatchUnavailable,
				"its batch's approval cannot be read: "+err.Error(), nil); werr != nil {
				return s.dbErr(ctx, "recording why a command waits", werr)
			}
		}
		return s.dbErr(ctx, "reading a batched command's approval", err)
	}
	span := s.startSpan(c, SpanDispatch)
	// Marked dispatched in a transaction shared with other sessions', and
	// sent only once it committed: a fan-out to thousands of nodes costs a
	// few commits, not one per node.
	st, err := s.storeGrouped(ctx, queue.Transition{CommandID: c.ID, NodeID: s.id.NodeID, To: queue.Dispatched, Epoch: s.epoch, KindVersion: version})
	if err != nil {
		endSpan(span, err)
		return s.dbErr(ctx, "dispatching", err)
	}
	cur, changed := st.cur, st.changed
	if !changed {
		span.SetAttributes(attribute.Bool("bc.dispatched", false))
		span.End()
		return nil // cancelled, settled, or fenced by a newer session meanwhile
	}
	s.takeCredit(cur)
	// The node's spans are children of this dispatch.
	err = s.sendTraced(cur, traceParentOf(span, cur.TraceParent), extras)
	endSpan(span, err)
	if err != nil {
		return err
	}
	s.g.opts.Observer.Dispatched(cur, s.g.opts.Now().Sub(dueAt(cur)))
	return nil
}

// takeCredit takes a credit of c's lane for c.
func (s *session) takeCredit(c queue.Command) {
	if _, ok := s.outstanding[c.ID]; ok {
		return
	}
	s.outstanding[c.ID] = credit{lane: c.Lane, attempts: c.Attempts}
	s.perLane[c.Lane]++
	s.g.opts.Observer.Credits(c.Lane, 1)
	s.g.noteOutstanding(s.id.NodeID, c.Lane, s.perLane[c.Lane])
}

// releaseCredit gives id's credit back.
func (s *session) releaseCredit(id string) {
	cr, ok := s.outstanding[id]
	if !ok {
		return
	}
	delete(s.outstanding, id)
	delete(s.cancelSent, id)
	s.perLane[cr.lane]--
	s.g.opts.Observer.Credits(cr.lane, -1)
}

// Envelope is c's envelope for a session of epoch: the command's bytes
// exactly as stored at enqueue, and its signature and worker certificate
// when it has them. Nothing is re-marshalled, so a signature over the
// stored bytes verifies on the node; the epoch, which each dispatch sets,
// travels outside them.
func Envelope(c queue.Command, epoch int64) (*agentv1.CommandEnvelope, error) {
	b, err := queue.WireBytes(c)
	if err != nil {
		return nil, err
	}
	return &agentv1.CommandEnvelope{Command: b, Signature: c.Signature, WorkerCert: c.WorkerCert, SessionEpoch: epoch}, nil
}

// sendCommand sends c (a replay) with its stored trace parent. A replay
// whose batch approval cannot be read ends the session: the node
// reconnects and the replay runs again.
func (s *session) sendCommand(ctx context.Context, c queue.Command) error {
	extras, err := s.batchExtras(ctx, c)
	if err != nil {
		return fmt.Errorf("reading the approval of batched command %s: %w", c.ID, err)
	}
	return s.sendTraced(c, c.TraceParent, extras)
}

// batchParts is what a batched command travels with beside its signed
// bytes: the approval and the inclusion proof of its leaf (empty for an
// unbatched command, or a batch recorded without a quorum).
type batchParts struct {
	approval  []byte
	leafIndex int64
	proof     [][]byte
}

func (s *session) batchExtras(ctx context.Context, c queue.Command) (batchParts, error) {
	if c.BatchID == "" {
		return batchParts{}, nil
	}
	appr, idx, proof, _, err := batches.Envelope(ctx, s.g.pool, c.BatchID, c.NodeID, c.Kind, c.Payload)
	if err != nil {
		return batchParts{}, err
	}
	return batchParts{approval: appr, leafIndex: idx, proof: proof}, nil
}

// sendTraced sends c's envelope with traceParent and its batch's parts
// beside its signed bytes; the node checks the approval and its leaf itself.
func (s *session) sendTraced(c queue.Command, traceParent string, b batchParts) error {
	env, err := Envelope(c, s.epoch)
	if err != nil {
		return err
	}
	env.TraceParent = traceParent
	env.BatchApproval, env.LeafIndex, env.InclusionProof = b.approval, b.leafIndex, b.proof
	return s.send(&agentv1.GatewayMessage{Msg: &agentv1.GatewayMessage_Command{Command: env}})
}

// role is the session certificate's role ("node" when it names none).
func (s *session) role() string {
	if s.id.Role == "" {
		return "node"
	}
	return s.id.Role
}

// manifestFor is the manifest of kind k at version (the one the node
// runs), or the registry's newest when version is "".
func (s *session) manifestFor(k, version string) (kind.Manifest, bool) {
	if version != "" {
		for _, m := range s.g.queue.Registry().Versions(k) {
			if m.Version == version {
				return m, true
			}
		}
	}
	return s.g.queue.Registry().Get(k)
}
