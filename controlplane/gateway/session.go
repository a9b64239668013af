package gateway

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/jackc/pgx/v5"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/better-compute/commands/controlplane/nodespecs"
	"github.com/better-compute/commands/controlplane/pki"
	"github.com/better-compute/commands/controlplane/queue"
	agentv1 "github.com/better-compute/commands/proto/bc/agent/v1"
	"github.com/better-compute/commands/sdk/kind"
)

// identityFromPeer reads the node identity from the verified mTLS client
// certificate: no session without a valid node certificate.
func identityFromPeer(ctx context.Context) (pki.Identity, error) {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return pki.Identity{}, status.Error(codes.Unauthenticated, "no peer: connect with mTLS and a node certificate")
	}
	ti, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok || len(ti.State.VerifiedChains) == 0 || len(ti.State.VerifiedChains[0]) == 0 {
		return pki.Identity{}, status.Error(codes.Unauthenticated, "no verified client certificate: join the node first (bcd join) and connect with its certificate")
	}
	var leaf *x509.Certificate = ti.State.VerifiedChains[0][0]
	id, err := pki.IdentityOf(leaf)
	if err != nil {
		return pki.Identity{}, status.Errorf(codes.Unauthenticated, "client certificate: %v", err)
	}
	return id, nil
}

// session is one node's stream.
type session struct {
	g      *Gateway
	id     pki.Identity
	hello  *agentv1.Hello
	epoch  int64
	stream grpc.BidiStreamingServer[agentv1.NodeMessage, agentv1.GatewayMessage]
	logger hclog.Logger
	wake   *waker
	kinds  map[string]string // kind -> digest the node reported

	outstanding map[string]kind.Lane
	perLane     map[kind.Lane]int
	cancelSent  map[string]time.Time
	specSent    int64
	lastPoll    time.Time // when sync last read the open commands
	idle        bool      // that read found none
	starved     bool      // that read left a pending command for want of credit
}

// Connect serves one node's session.
func (g *Gateway) Connect(stream grpc.BidiStreamingServer[agentv1.NodeMessage, agentv1.GatewayMessage]) error {
	ctx := stream.Context()
	id, err := identityFromPeer(ctx)
	if err != nil {
		return err
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
		var qe *queue.Error
		if errors.As(err, &qe) && qe.Code == queue.NotFound {
			return status.Errorf(codes.NotFound, "node %s is not registered or was deleted", id.NodeID)
		}
		return status.Errorf(codes.Unavailable, "beginning the session: %v", err)
	}
	s := &session{
		g: g, id: id, hello: hello, epoch: epoch, stream: stream,
		logger:      g.logger.With("node_id", id.NodeID, "epoch", epoch),
		kinds:       map[string]string{},
		outstanding: map[string]kind.Lane{},
		perLane:     map[kind.Lane]int{},
		cancelSent:  map[string]time.Time{},
	}
	for _, k := range hello.GetKinds() {
		s.kinds[k.GetKind()] = k.GetDigest()
	}
	s.wake = g.hub.register(id.NodeID)
	defer g.hub.unregister(id.NodeID, s.wake)
	s.logger.Info("session opened", "journal_id", hello.GetJournalId(), "boot_id", hello.GetBootId(), "role", id.Role)
	if err := s.send(&agentv1.GatewayMessage{Msg: &agentv1.GatewayMessage_Welcome{Welcome: &agentv1.Welcome{
		ServerTime: timestamppb.New(g.opts.Now()), SessionEpoch: epoch, TrustBundle: g.opts.TrustBundle,
	}}}); err != nil {
		return err
	}
	return s.run(ctx)
}

// beginSession bumps the epoch and settles what the reconnect proves: a new
// boot id or role ("a new boot or role on rejoin") completes in-flight
// self-terminating commands as succeeded with rebooted: true; a new journal id fails in-flight commands that are not
// retry-safe with journal-lost. All in one transaction.
func (g *Gateway) beginSession(ctx context.Context, hello *agentv1.Hello, role string) (int64, error) {
	var epoch int64
	err := pgx.BeginFunc(ctx, g.pool, func(tx pgx.Tx) error {
		var oldJournal, oldBoot, oldRole string
		err := tx.QueryRow(ctx, `SELECT journal_id, boot_id, role FROM nodes WHERE id = $1 AND deleted_at IS NULL FOR UPDATE`, hello.GetNodeId()).Scan(&oldJournal, &oldBoot, &oldRole)
		if errors.Is(err, pgx.ErrNoRows) {
			_, err = g.queue.BeginSession(ctx, tx, hello.GetNodeId()) // returns NOT_FOUND
			return err
		}
		if err != nil {
			return fmt.Errorf("reading node: %w", err)
		}
		if epoch, err = g.queue.BeginSession(ctx, tx, hello.GetNodeId()); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `UPDATE nodes SET journal_id = $2, boot_id = $3, role = $4 WHERE id = $1`,
			hello.GetNodeId(), hello.GetJournalId(), hello.GetBootId(), role); err != nil {
			return fmt.Errorf("recording journal and boot ids: %w", err)
		}
		open, err := g.queue.ListOpen(ctx, tx, hello.GetNodeId())
		if err != nil {
			return err
		}
		newBoot := oldBoot != "" && oldBoot != hello.GetBootId()
		newRole := oldRole != role
		newJournal := oldJournal != "" && oldJournal != hello.GetJournalId()
		for _, c := range open {
			if c.State == queue.Pending {
				continue
			}
			var t *queue.Transition
			switch {
			case (newBoot || newRole) && c.Flags.SelfTerminating:
				t = &queue.Transition{CommandID: c.ID, To: queue.Succeeded, Reason: "rebooted", Rebooted: true}
			case newJournal && !c.Flags.RetrySafe:
				t = &queue.Transition{CommandID: c.ID, To: queue.Failed, Reason: "journal-lost"}
			}
			if t == nil {
				continue
			}
			if _, _, err := g.queue.Transition(ctx, tx, *t); err != nil {
				return err
			}
			g.logger.Info("settled by reconnect", "node_id", c.NodeID, "command_id", c.ID, "state", t.To, "reason", t.Reason)
		}
		return nil
	})
	return epoch, err
}

type recvResult struct {
	msg *agentv1.NodeMessage
	err error
}

func (s *session) run(ctx context.Context) error {
	// Buffered, so the reader runs ahead and a turn of the loop can take a
	// command's queued reports together (see superseded).
	recv := make(chan recvResult, maxBatch)
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
	if err := s.sync(ctx, true); err != nil {
		return err
	}
	if err := s.sendSpec(ctx, s.hello.GetAppliedGeneration()); err != nil {
		return err
	}
	tick := time.NewTicker(s.tickEvery())
	defer tick.Stop()
	for {
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
			for i, m := range batch {
				if superseded(batch, i) {
					// A later report in this batch moves the same command at
					// least as far: acknowledge this one without a write.
					u := m.GetUpdate()
					if err := s.send(&agentv1.GatewayMessage{Msg: &agentv1.GatewayMessage_Ack{Ack: &agentv1.UpdateAck{CommandId: u.GetCommandId(), UpdateSeq: u.GetUpdateSeq()}}}); err != nil {
						return err
					}
					continue
				}
				if err := s.handle(ctx, m); err != nil {
					return err
				}
			}
			if closed {
				return nil
			}
		case <-s.wake.ch:
			if s.wake.spec.Swap(false) {
				if err := s.sendSpec(ctx, s.specSent); err != nil {
					return err
				}
			}
			if err := s.sync(ctx, false); err != nil {
				return err
			}
		case <-tick.C:
			if s.idle && time.Since(s.lastPoll) < s.g.opts.IdlePoll {
				continue
			}
			if err := s.sync(ctx, false); err != nil {
				return err
			}
		}
	}
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
		return fmt.Errorf("sending to node: %w", err)
	}
	return nil
}

// sync reads the node's open commands and does what they need: replay (on
// session start), dispatch within credits, and Cancel for in-flight commands
// whose cancel was requested, until the node reports a terminal state.
func (s *session) sync(ctx context.Context, replay bool) error {
	open, err := s.g.queue.ListOpen(ctx, s.g.pool, s.id.NodeID)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		s.logger.Warn("reading open commands", "error", err)
		return nil
	}
	s.lastPoll, s.idle, s.starved = time.Now(), len(open) == 0, false
	now := s.g.opts.Now()
	openIDs := make(map[string]bool, len(open))
	for _, c := range open {
		openIDs[c.ID] = true
	}
	// Commands settled elsewhere (the sweeper, a reconnect) give their credit back.
	for id := range s.outstanding {
		if !openIDs[id] {
			s.release(id)
		}
	}
	for _, c := range open {
		switch c.State {
		case queue.Dispatched, queue.Acked, queue.Running:
			if replay {
				if err := s.sendCommand(c); err != nil {
					return err
				}
				s.hold(c)
			}
			if c.CancelRequestedAt != nil && now.Sub(s.cancelSent[c.ID]) >= s.g.opts.CancelResend {
				s.cancelSent[c.ID] = now
				if err := s.send(&agentv1.GatewayMessage{Msg: &agentv1.GatewayMessage_Cancel{Cancel: &agentv1.Cancel{CommandId: c.ID}}}); err != nil {
					return err
				}
			}
		case queue.Pending:
			if err := s.dispatch(ctx, c, now); err != nil {
				return err
			}
		}
	}
	return nil
}

func (s *session) dispatch(ctx context.Context, c queue.Command, now time.Time) error {
	if c.NextAttemptAt != nil && c.NextAttemptAt.After(now) {
		return nil
	}
	if c.NotBefore != nil && c.NotBefore.After(now) {
		return nil
	}
	if !c.NotAfter.After(now) {
		return nil // the sweeper expires it
	}
	if s.perLane[c.Lane] >= s.g.opts.Credits[c.Lane] {
		s.starved = true
		return nil // no credit: it stays pending until one returns
	}
	if d, ok := s.kinds[c.Kind]; ok && d != "" {
		if m, registered := s.g.queue.Registry().Get(c.Kind); registered && m.Digest() != d {
			s.logger.Warn("node runs another manifest of this kind; not dispatching", "kind", c.Kind, "command_id", c.ID)
			return nil
		}
	}
	// The restricted identity is checked again at dispatch against the
	// session's certificate.
	if !s.id.Allows(c.Kind) {
		_, _, err := s.g.queue.Transition(ctx, s.g.pool, queue.Transition{
			CommandID: c.ID, To: queue.Rejected, Reason: "UNSUPPORTED: runs a restricted identity that does not accept " + c.Kind,
		})
		return s.dbErr(ctx, err)
	}
	cur, changed, err := s.g.queue.Transition(ctx, s.g.pool, queue.Transition{CommandID: c.ID, To: queue.Dispatched, Epoch: s.epoch})
	if err != nil {
		return s.dbErr(ctx, err)
	}
	if !changed {
		return nil // cancelled, settled, or fenced by a newer session meanwhile
	}
	s.hold(cur)
	return s.sendCommand(cur)
}

func (s *session) dbErr(ctx context.Context, err error) error {
	if err == nil || ctx.Err() != nil {
		return ctx.Err()
	}
	s.logger.Warn("database", "error", err)
	return nil
}

func (s *session) hold(c queue.Command) {
	if _, ok := s.outstanding[c.ID]; ok {
		return
	}
	s.outstanding[c.ID] = c.Lane
	s.perLane[c.Lane]++
	s.g.noteOutstanding(s.id.NodeID, c.Lane, s.perLane[c.Lane])
}

func (s *session) release(id string) {
	lane, ok := s.outstanding[id]
	if !ok {
		return
	}
	delete(s.outstanding, id)
	delete(s.cancelSent, id)
	s.perLane[lane]--
}

// Envelope builds the command envelope: the exact bytes of the command.
func Envelope(c queue.Command, epoch int64) (*agentv1.CommandEnvelope, error) {
	pc := &agentv1.Command{
		Id: c.ID, NodeId: c.NodeID, Seq: c.Seq, Kind: c.Kind, Payload: c.Payload,
		NotAfter: timestamppb.New(c.NotAfter), MinGeneration: c.MinGeneration,
		IdempotencyKey: c.IdempotencyKey, BatchId: c.BatchID, CreatedAt: timestamppb.New(c.CreatedAt),
	}
	if c.NotBefore != nil {
		pc.NotBefore = timestamppb.New(*c.NotBefore)
	}
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(pc)
	if err != nil {
		return nil, fmt.Errorf("marshalling command %s: %w", c.ID, err)
	}
	return &agentv1.CommandEnvelope{Command: b, SessionEpoch: epoch}, nil
}

func (s *session) sendCommand(c queue.Command) error {
	env, err := Envelope(c, s.epoch)
	if err != nil {
		return err
	}
	return s.send(&agentv1.GatewayMessage{Msg: &agentv1.GatewayMessage_Command{Command: env}})
}

func (s *session) sendSpec(ctx context.Context, have int64) error {
	spec, err := nodespecs.Latest(ctx, s.g.pool, s.id.NodeID)
	if err != nil {
		return s.dbErr(ctx, err)
	}
	if spec.Generation == 0 || spec.Generation <= have {
		return nil
	}
	s.specSent = spec.Generation
	return s.send(&agentv1.GatewayMessage{Msg: &agentv1.GatewayMessage_Spec{Spec: &agentv1.Spec{
		Generation: spec.Generation, Spec: spec.Spec, Signature: spec.Signature,
	}}})
}

var stateOf = map[agentv1.CommandState]queue.State{
	agentv1.CommandState_COMMAND_STATE_ACKED:     queue.Acked,
	agentv1.CommandState_COMMAND_STATE_RUNNING:   queue.Running,
	agentv1.CommandState_COMMAND_STATE_SUCCEEDED: queue.Succeeded,
	agentv1.CommandState_COMMAND_STATE_FAILED:    queue.Failed,
	agentv1.CommandState_COMMAND_STATE_REJECTED:  queue.Rejected,
	agentv1.CommandState_COMMAND_STATE_EXPIRED:   queue.Expired,
	agentv1.CommandState_COMMAND_STATE_CANCELLED: queue.Cancelled,
}

func (s *session) handle(ctx context.Context, m *agentv1.NodeMessage) error {
	switch msg := m.Msg.(type) {
	case *agentv1.NodeMessage_Update:
		return s.update(ctx, msg.Update)
	case *agentv1.NodeMessage_SpecRequest:
		return s.sendSpec(ctx, msg.SpecRequest.GetHaveGeneration())
	case *agentv1.NodeMessage_Status:
		return s.status(ctx, msg.Status)
	case *agentv1.NodeMessage_Hello:
		return status.Error(codes.InvalidArgument, "Hello may only open a session")
	}
	return nil
}

func (s *session) update(ctx context.Context, u *agentv1.CommandUpdate) error {
	ack := func() error {
		return s.send(&agentv1.GatewayMessage{Msg: &agentv1.GatewayMessage_Ack{Ack: &agentv1.UpdateAck{CommandId: u.GetCommandId(), UpdateSeq: u.GetUpdateSeq()}}})
	}
	if u.GetState() == agentv1.CommandState_COMMAND_STATE_REJECTED && u.GetRejectCode() == agentv1.RejectCode_REJECT_CODE_BUSY {
		cur, err := s.g.queue.Get(ctx, s.g.pool, s.id.NodeID, u.GetCommandId())
		if err != nil {
			return ack()
		}
		backoff := BusyBackoff(cur.Attempts, s.g.opts.BusyBackoffMin, s.g.opts.BusyBackoffMax)
		if _, _, err := s.g.queue.Requeue(ctx, s.g.pool, s.id.NodeID, u.GetCommandId(), s.epoch, backoff); err != nil {
			return s.dbErr(ctx, err)
		}
		s.release(u.GetCommandId())
		return ack()
	}
	to, ok := stateOf[u.GetState()]
	if !ok {
		s.logger.Warn("update without a state", "command_id", u.GetCommandId())
		return ack()
	}
	t := queue.Transition{
		CommandID: u.GetCommandId(), NodeID: s.id.NodeID, To: to, Reason: u.GetReason(),
		ResultSHA256: u.GetResultSha256(), NodeSig: u.GetNodeSig(), Rebooted: u.GetRebooted(), Epoch: s.epoch,
	}
	if to == queue.Rejected && u.GetRejectCode() != agentv1.RejectCode_REJECT_CODE_UNSPECIFIED && t.Reason == "" {
		t.Reason = rejectName(u.GetRejectCode())
	}
	if len(u.GetResult()) > 0 {
		if json.Valid(u.GetResult()) {
			t.Result = u.GetResult()
		} else {
			s.logger.Warn("result is not JSON; storing it as a string", "command_id", u.GetCommandId())
			b, _ := json.Marshal(string(u.GetResult()))
			t.Result = b
		}
	}
	if u.GetProgressMessage() != "" || u.GetProgressPercent() != 0 {
		b, _ := json.Marshal(map[string]any{"percent": u.GetProgressPercent(), "message": u.GetProgressMessage()})
		t.Progress = b
	}
	cur, changed, err := s.g.queue.Transition(ctx, s.g.pool, t)
	if err != nil {
		var qe *queue.Error
		if errors.As(err, &qe) && qe.Code == queue.NotFound {
			return ack()
		}
		return s.dbErr(ctx, err)
	}
	if cur.State.Terminal() {
		if changed && s.g.opts.OnSettled != nil {
			s.g.opts.OnSettled(ctx, cur)
		}
		s.release(cur.ID)
		// A credit came back: what the last read left pending for want of
		// one may go now. Without such a command there is nothing to read.
		if s.starved {
			select {
			case s.wake.ch <- struct{}{}:
			default:
			}
		}
	}
	return ack()
}

func rejectName(c agentv1.RejectCode) string {
	n := c.String()
	const prefix = "REJECT_CODE_"
	if len(n) > len(prefix) {
		return n[len(prefix):]
	}
	return n
}

func (s *session) status(ctx context.Context, st *agentv1.NodeStatus) error {
	var inv any
	if len(st.GetInventory()) > 0 && json.Valid(st.GetInventory()) {
		inv = string(st.GetInventory())
	}
	conds := make([]map[string]any, 0, len(st.GetConditions()))
	for _, c := range st.GetConditions() {
		// The API shows a condition's status as "True" or "False", as
		// Kubernetes does; store it in that form.
		st := "False"
		if c.GetStatus() {
			st = "True"
		}
		m := map[string]any{"type": c.GetType(), "status": st, "reason": c.GetReason(), "message": c.GetMessage()}
		if c.GetSince() != nil {
			m["since"] = c.GetSince().AsTime()
		}
		conds = append(conds, m)
	}
	cb, _ := json.Marshal(conds)
	_, err := s.g.pool.Exec(ctx, `UPDATE nodes SET inventory = coalesce($2::jsonb, inventory), conditions = $3::jsonb WHERE id = $1`, s.id.NodeID, inv, string(cb))
	return s.dbErr(ctx, err)
}

// BusyBackoff is BUSY's backoff: exponential from min to max over the
// command's attempts, with full jitter in its upper half.
func BusyBackoff(attempts int, min, max time.Duration) time.Duration {
	d := min
	for i := 1; i < attempts && d < max; i++ {
		d *= 2
	}
	if d > max {
		d = max
	}
	half := d / 2
	return half + time.Duration(rand.Int64N(int64(half)+1))
}

// maxBatch bounds how many queued messages one turn of the loop takes.
const maxBatch = 64

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

// updateRank orders reported states as the database does (bc_state_rank).
func updateRank(st agentv1.CommandState) int {
	switch st {
	case agentv1.CommandState_COMMAND_STATE_ACKED:
		return 2
	case agentv1.CommandState_COMMAND_STATE_RUNNING:
		return 3
	case agentv1.CommandState_COMMAND_STATE_SUCCEEDED, agentv1.CommandState_COMMAND_STATE_FAILED,
		agentv1.CommandState_COMMAND_STATE_REJECTED, agentv1.CommandState_COMMAND_STATE_EXPIRED,
		agentv1.CommandState_COMMAND_STATE_CANCELLED:
		return 4
	}
	return 0
}

// superseded reports whether batch[i] is a non-terminal update that a later
// update of the same command in the batch outranks or equals: reports may
// skip steps, so landing only the later one loses nothing but a write. A
// node that sends acked, running and succeeded back to back costs one
// transition instead of three.
func superseded(batch []*agentv1.NodeMessage, i int) bool {
	u := batch[i].GetUpdate()
	if u == nil || updateRank(u.GetState()) == 0 || updateRank(u.GetState()) == 4 {
		return false
	}
	for _, m := range batch[i+1:] {
		later := m.GetUpdate()
		if later == nil || later.GetCommandId() != u.GetCommandId() {
			continue
		}
		if later.GetRejectCode() == agentv1.RejectCode_REJECT_CODE_BUSY {
			continue
		}
		if updateRank(later.GetState()) >= updateRank(u.GetState()) {
			return true
		}
	}
	return false
}
