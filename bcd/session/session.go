// Package session is bcd's side of the control plane session: one gRPC
// bidirectional stream (bc.agent.v1.Session) over mTLS with the node
// certificate from `bcd join`. It opens each session with Hello, takes
// from Welcome its server time (bounded by maxClockSkew once the trust
// bundle holds command-signing roots) and its trust bundle (which the
// truststore takes only when a root it trusts signed a higher version),
// hands received commands to the daemon (which verifies them and answers
// duplicates from its journal or re-attaches to the running command),
// relays Cancel, applies a Spec only when it verifies (and then the signed
// statement) and attests the GPU bindings it applied (AllocationBound),
// forwards every command update with an update_seq and resends the ones not
// acknowledged, and reports the node's inventory and conditions, among them
// what it refused of the gateway (TrustBundle, ClockSkew, NodeSpec). When
// the stream breaks it reconnects with exponential backoff and jitter, on a
// new connection, and sooner when a gateway that refused connections
// listens again (reconnect.go).
package session

import (
	"context"
	"crypto"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/better-compute/commands/bcd/conditions"
	"github.com/better-compute/commands/bcd/daemon"
	"github.com/better-compute/commands/bcd/secrets"
	"github.com/better-compute/commands/bcd/truststore"
	"github.com/better-compute/commands/internal/backoff"
	"github.com/better-compute/commands/internal/sessiongrpc"
	agentv1 "github.com/better-compute/commands/proto/bc/agent/v1"
	"github.com/better-compute/commands/sdk/kind"
)

// Defaults for the reconnect backoff, the resend of unacknowledged updates
// and the status check.
const (
	DefaultBackoffMin  = time.Second
	DefaultBackoffMax  = 30 * time.Second
	DefaultResendMin   = time.Second
	DefaultResendMax   = 30 * time.Second
	DefaultStatusEvery = 30 * time.Second
)

// Config configures a session client.
type Config struct {
	// Address is the gateway's host:port.
	Address string
	// TLS carries the node certificate and the node CA (mTLS); nil dials
	// without transport security (only DialOptions-provided credentials).
	TLS *tls.Config
	// DialOptions are added to the dial (tests).
	DialOptions []grpc.DialOption
	// NodeID and Role are reported in Hello.
	NodeID string
	Role   string
	// Version is the daemon version reported in Hello.
	Version string
	// Kinds lists the loaded kinds, reported in Hello with their digests.
	Kinds func() []kind.Manifest
	// RefusedPlugins lists the plugin files bcd refused to run, reported in
	// Hello so that the control plane says why their kinds' commands wait.
	RefusedPlugins func() []*agentv1.PluginRefusal
	// Conditions computes the node's conditions from the applied spec; nil
	// uses a conditions.Detector with its defaults.
	Conditions *conditions.Detector
	// BackoffMin and BackoffMax bound the reconnect backoff (1 s, 30 s).
	BackoffMin, BackoffMax time.Duration
	// ProbeEvery is how often, while waiting out the backoff, the client
	// checks whether a gateway that refused connections accepts them
	// again (DefaultProbeEvery); ReadyJitter bounds the random delay from
	// seeing it accept to opening the session (DefaultReadyJitter).
	ProbeEvery, ReadyJitter time.Duration
	// ResendMin and ResendMax bound the backoff of resending, within a
	// session, updates the gateway has not acknowledged (1 s, 30 s).
	ResendMin, ResendMax time.Duration
	// StatusEvery is how often the inventory and conditions are checked
	// for a change beside the checks after each outcome (30 s).
	StatusEvery time.Duration
	// Trust is the node's trust bundle: each Welcome's bundle is offered to
	// it and Hello names its version; once it holds command-signing roots,
	// a Welcome's server time moves the clock only within maxClockSkew and
	// a node spec is applied only when signed. Nil: no bundle, as before
	// signing (commands and specs unsigned, the offset kept whatever it is).
	Trust *truststore.Store
	// NodeKey is the node's key: it signs the AllocationBound statements of
	// applied specs. Nil sends none.
	NodeKey crypto.Signer
	// OnWelcome, when set, is called on its own goroutine after each
	// Welcome: the control plane acknowledged the node (daemon.upgrade's
	// rejoin marker is written there).
	OnWelcome func()
	// Secrets, when set, exchanges commands' secretRefs over this
	// session: the client is its sender and hands it the answers.
	Secrets *secrets.Exchanger
	// Logger logs; nil discards.
	Logger hclog.Logger
}

// Client holds bcd's session with the control plane.
type Client struct {
	cfg    Config
	d      *daemon.Daemon
	logger hclog.Logger
	subCtx context.Context
	subEnd context.CancelFunc
	subs   <-chan daemon.Update

	// sendLock serialises sends on the current stream; it is taken before
	// lock when both are held.
	sendLock sync.Mutex
	// lock guards everything below.
	lock     sync.Mutex
	stream   agentv1.Session_ConnectClient
	epoch    int64
	seq      int64
	unacked  []*outgoing
	sessions int
	lastInv  time.Time
	lastCond string
	sentOnce bool
	// endSession ends the session open now (nil between sessions): Rehello
	// calls it so that the next Hello carries what changed.
	endSession context.CancelFunc

	// own are the conditions the client finds itself (TrustBundle,
	// ClockSkew, NodeSpec).
	own ownConditions
	// lastRefusal is the last trust bundle refusal logged; only the
	// session loop (one session at a time) reads or writes it.
	lastRefusal string

	statusKick chan struct{}
	// acked is signalled when an ack took updates off unacked.
	acked chan struct{}
}

// New builds a client for daemon d and subscribes to its updates at once,
// so that outcomes published before the first session (Recover's reruns)
// are kept and sent when it opens. Call Close when done if Run is never
// called.
func New(cfg Config, d *daemon.Daemon) *Client {
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	if cfg.BackoffMin <= 0 {
		cfg.BackoffMin = DefaultBackoffMin
	}
	if cfg.BackoffMax <= 0 {
		cfg.BackoffMax = DefaultBackoffMax
	}
	if cfg.BackoffMax < cfg.BackoffMin {
		cfg.BackoffMax = cfg.BackoffMin
	}
	if cfg.ProbeEvery <= 0 {
		cfg.ProbeEvery = DefaultProbeEvery
	}
	if cfg.ReadyJitter <= 0 {
		cfg.ReadyJitter = DefaultReadyJitter
	}
	if cfg.ResendMin <= 0 {
		cfg.ResendMin = DefaultResendMin
	}
	if cfg.ResendMax < cfg.ResendMin {
		cfg.ResendMax = max(DefaultResendMax, cfg.ResendMin)
	}
	if cfg.StatusEvery <= 0 {
		cfg.StatusEvery = DefaultStatusEvery
	}
	if cfg.Role == "" {
		cfg.Role = "node"
	}
	if cfg.Conditions == nil {
		cfg.Conditions = conditions.New(conditions.Config{Logger: cfg.Logger})
	}
	ctx, cancel := context.WithCancel(context.Background())
	c := &Client{
		cfg: cfg, d: d, logger: cfg.Logger.Named("session"),
		subCtx: ctx, subEnd: cancel, subs: d.Subscribe(ctx),
		statusKick: make(chan struct{}, 1),
		acked:      make(chan struct{}, 1),
	}
	if cfg.Secrets != nil {
		cfg.Secrets.SetSender(c.send)
	}
	return c
}

// Close ends the daemon subscription. Run calls it on return.
func (c *Client) Close() { c.subEnd() }

// Sessions reports how many sessions got a Welcome so far.
func (c *Client) Sessions() int {
	c.lock.Lock()
	defer c.lock.Unlock()
	return c.sessions
}

// Connected reports whether a session is open now.
func (c *Client) Connected() bool {
	c.lock.Lock()
	defer c.lock.Unlock()
	return c.stream != nil
}

// Unacked reports how many updates wait for the gateway's ack.
func (c *Client) Unacked() int {
	c.lock.Lock()
	defer c.lock.Unlock()
	return len(c.unacked)
}

// RequestSpec asks the gateway for a newer node spec (the daemon calls it
// through Config.OnSpecRequest when a command needs one). Without a
// session it does nothing: every new session is sent the latest spec.
func (c *Client) RequestSpec(have int64) {
	_ = c.send(&agentv1.NodeMessage{Msg: &agentv1.NodeMessage_SpecRequest{SpecRequest: &agentv1.SpecRequest{HaveGeneration: have}}})
}

// Rehello ends the session open now, so that the client reconnects (after
// the shortest backoff) with a new Hello: how the kinds bcd reloaded, with
// their new digests, reach the control plane. Nothing is lost: the
// gateway replays what is not terminal, the daemon re-attaches what runs,
// and unacknowledged updates are sent again after the Welcome. Without an
// open session it does nothing; the next Hello carries the kinds anyway.
func (c *Client) Rehello() {
	c.lock.Lock()
	end := c.endSession
	c.lock.Unlock()
	if end != nil {
		c.logger.Info("ending the session so that a new Hello reports the reloaded kinds")
		end()
	}
}

// Run holds sessions until ctx ends, reconnecting with exponential backoff
// and jitter after each failure; a session that got its Welcome resets the
// backoff. Each session gets a ClientConn of its own, so that every
// attempt dials the gateway afresh: a connection kept for bcd's whole
// life answered an attempt after an outage at once with the error of its
// last failed dial ("connection refused") while gRPC's own connect backoff
// ran, though the gateway listened again (28.4 s after bc-server was ready
// in a 40 s outage). While the backoff runs, waitOut watches the gateway
// and cuts the wait short when it listens again.
func (c *Client) Run(ctx context.Context) error {
	defer c.Close()
	go c.forward(ctx)
	creds := grpc.WithTransportCredentials(credentials.NewTLS(c.cfg.TLS))
	opts := append(sessiongrpc.DialOptions(), c.cfg.DialOptions...)
	if c.cfg.TLS != nil {
		opts = append(opts, creds)
	}
	wait := backoff.New(c.cfg.BackoffMin, c.cfg.BackoffMax)
	for {
		conn, err := grpc.NewClient(c.cfg.Address, opts...)
		if err != nil {
			return fmt.Errorf("session: dialing %s: %w", c.cfg.Address, err)
		}
		welcomed, err := c.session(ctx, conn)
		_ = conn.Close()
		if ctx.Err() != nil {
			return nil
		}
		if welcomed {
			wait.Reset() // a session that opened: the next loss waits the minimum again
		}
		next := wait.NextBackOff()
		c.logger.Warn("session ended; reconnecting", "error", err, "in", next)
		c.waitOut(ctx, next)
		if ctx.Err() != nil {
			return nil
		}
	}
}

// Jitter returns a wait in [d/2, d]: the upper half of full jitter, so
// reconnecting nodes spread out without ever retrying at once.
func Jitter(d time.Duration) time.Duration {
	half := d / 2
	return half + time.Duration(rand.Int64N(int64(d-half)+1))
}

// session holds one stream until it breaks; welcomed says whether it got
// as far as the Welcome.
func (c *Client) session(ctx context.Context, conn *grpc.ClientConn) (welcomed bool, err error) {
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	c.lock.Lock()
	c.endSession = cancel
	c.lock.Unlock()
	defer func() {
		c.lock.Lock()
		c.endSession = nil
		c.lock.Unlock()
	}()
	stream, err := agentv1.NewSessionClient(conn).Connect(sctx)
	if err != nil {
		return false, fmt.Errorf("connect: %w", err)
	}
	hello := c.hello()
	if err := stream.Send(&agentv1.NodeMessage{Msg: &agentv1.NodeMessage_Hello{Hello: hello}}); err != nil {
		return false, fmt.Errorf("hello: %w", err)
	}
	defer func() {
		c.sendLock.Lock()
		c.lock.Lock()
		if c.stream == stream {
			c.stream = nil
		}
		c.lock.Unlock()
		c.sendLock.Unlock()
	}()
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	for {
		msg, err := stream.Recv()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return welcomed, errors.New("the gateway closed the session")
			}
			return welcomed, fmt.Errorf("recv: %w", err)
		}
		switch m := msg.Msg.(type) {
		case *agentv1.GatewayMessage_Welcome:
			if welcomed {
				continue
			}
			welcomed = true
			c.welcome(stream, m.Welcome)
			c.resendAllocationBounds(sctx)
			wg.Add(2)
			go func() {
				defer wg.Done()
				c.statusLoop(sctx)
			}()
			go func() {
				defer wg.Done()
				c.resendLoop(sctx, stream)
			}()
		case *agentv1.GatewayMessage_Command:
			c.command(ctx, m.Command)
		case *agentv1.GatewayMessage_Cancel:
			id := m.Cancel.GetCommandId()
			if err := c.d.Cancel(id); err != nil {
				c.logger.Warn("cancel", "command_id", id, "error", err)
			}
		case *agentv1.GatewayMessage_Spec:
			c.spec(m.Spec)
		case *agentv1.GatewayMessage_Ack:
			c.ack(m.Ack)
		case *agentv1.GatewayMessage_SecretResponse:
			if c.cfg.Secrets != nil {
				c.cfg.Secrets.Deliver(m.SecretResponse)
			}
		}
	}
}

func (c *Client) hello() *agentv1.Hello {
	h := &agentv1.Hello{
		NodeId: c.cfg.NodeID, JournalId: c.d.JournalID(), BootId: c.d.BootID(), Role: c.cfg.Role,
		DaemonVersion: c.cfg.Version, AppliedGeneration: c.d.State().Generation(), InFlight: c.d.InFlight(),
	}
	if c.cfg.Trust != nil {
		h.TrustVersion = c.cfg.Trust.Version()
	}
	if c.cfg.Kinds != nil {
		for _, m := range c.cfg.Kinds() {
			h.Kinds = append(h.Kinds, &agentv1.KindDigest{Kind: m.Kind, Digest: m.Digest(), Version: m.Version})
		}
	}
	if c.cfg.RefusedPlugins != nil {
		h.RefusedPlugins = c.cfg.RefusedPlugins()
	}
	return h
}

// welcome makes stream the current one and resends, in order, every update
// the gateway has not acknowledged: a report lost with the last session is
// never lost for good.
func (c *Client) welcome(stream agentv1.Session_ConnectClient, w *agentv1.Welcome) {
	c.welcomeTrust(w)
	c.sendLock.Lock()
	defer c.sendLock.Unlock()
	c.lock.Lock()
	c.stream, c.epoch = stream, w.GetSessionEpoch()
	c.sessions++
	c.sentOnce = false
	resend := c.toResend(0)
	c.lock.Unlock()
	c.logger.Info("session open", "epoch", w.GetSessionEpoch(), "resending", len(resend))
	c.resend(stream, resend)
	if c.cfg.OnWelcome != nil {
		go c.cfg.OnWelcome()
	}
}

// send sends m on the current stream; without one it reports false.
func (c *Client) send(m *agentv1.NodeMessage) bool {
	c.sendLock.Lock()
	defer c.sendLock.Unlock()
	c.lock.Lock()
	s := c.stream
	c.lock.Unlock()
	if s == nil {
		return false
	}
	if err := s.Send(m); err != nil {
		c.logger.Debug("send failed; the session will reconnect", "error", err)
		return false
	}
	return true
}

func (c *Client) kickStatus() {
	select {
	case c.statusKick <- struct{}{}:
	default:
	}
}
