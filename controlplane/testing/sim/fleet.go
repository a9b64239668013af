// Package sim is the fleet simulator: it provisions N nodes in the control
// plane's database, issues them certificates from the node CA, holds one
// FakeDaemon session per node against a gateway, and drives a workload
// (steady single commands, or one command fanned out to every node) while
// measuring what the spec's targets name: dispatch latency from commit to the
// node receiving the command, and the time a fan-out takes to settle.
package sim

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/jackc/pgx/v5"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/better-compute/commands/controlplane/commands/queue"
	"github.com/better-compute/commands/controlplane/testing/fakedaemon"
	"github.com/better-compute/commands/controlplane/trust/pki"
	"github.com/better-compute/commands/internal/sessiongrpc"
	"github.com/better-compute/commands/internal/trust"
	agentv1 "github.com/better-compute/commands/proto/bc/agent/v1"
	"github.com/better-compute/commands/sdk/kind"
)

// Kind is the command kind the simulator enqueues: a retry-safe control-lane
// no-op that a FakeDaemon acks, runs and succeeds at once. The control plane
// under test must register it (the gateway's registry and the simulator's
// must agree).
var Kind = kind.Manifest{
	Kind: "sim.noop", Lane: kind.LaneControl, Timeout: kind.Duration(time.Minute),
	Roles: []string{"node"}, Flags: kind.Flags{RetrySafe: true}, APIRunnable: true,
	Version: "1.0.0", Description: "fleet simulator no-op",
}

// Provision creates a tenant and n nodes in one transaction (one round trip
// per node, one commit) and returns the tenant id and the node ids.
func Provision(ctx context.Context, db queue.DBTX, q *queue.Queue, n int) (tenantID string, nodeIDs []string, err error) {
	beginner, ok := db.(interface {
		Begin(context.Context) (pgx.Tx, error)
	})
	if !ok {
		return "", nil, errors.New("provision: the database handle cannot begin a transaction")
	}
	err = pgx.BeginFunc(ctx, beginner, func(tx pgx.Tx) error {
		ten, err := q.CreateTenant(ctx, tx, queue.Tenant{Name: "sim"})
		if err != nil {
			return err
		}
		tenantID = ten.ID
		nodeIDs = make([]string, 0, n)
		for i := 0; i < n; i++ {
			node, err := q.CreateNode(ctx, tx, queue.Node{TenantID: ten.ID})
			if err != nil {
				return err
			}
			nodeIDs = append(nodeIDs, node.ID)
		}
		return nil
	})
	if err != nil {
		return "", nil, fmt.Errorf("provisioning %d simulated nodes: %w", n, err)
	}
	return tenantID, nodeIDs, nil
}

// IssueCerts issues one client certificate per node id from the node CA. For
// speed every certificate carries the same ECDSA P-256 key: the gateway reads
// the node's identity from the certificate, never from the key, so a shared
// key changes nothing it checks.
func IssueCerts(ca *pki.CA, nodeIDs []string) ([]tls.Certificate, error) {
	keyPEM, csr, err := trust.NewKeyAndCSR("sim")
	if err != nil {
		return nil, fmt.Errorf("simulator key: %w", err)
	}
	out := make([]tls.Certificate, 0, len(nodeIDs))
	for _, id := range nodeIDs {
		certPEM, err := ca.IssueNode(csr, trust.Identity{NodeID: id, Role: "node"})
		if err != nil {
			return nil, fmt.Errorf("certificate for %s: %w", id, err)
		}
		c, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			return nil, fmt.Errorf("key pair for %s: %w", id, err)
		}
		out = append(out, c)
	}
	return out, nil
}

// FleetConfig says where and how the fleet connects.
type FleetConfig struct {
	// Addr is the gateway's address (host:port).
	Addr string
	// Addrs, when set, are several gateways' addresses (Addr is then
	// ignored): node i starts on Addrs[i % len], as a load balancer would
	// spread them.
	Addrs []string
	// Rehome makes a node whose session ends reconnect, to the next
	// gateway of Addrs (a load balancer's choice once a connection broke),
	// after RehomeDelay (default 250 ms) with up to as much again of
	// jitter, until the fleet closes. Without it a session that ends stays
	// ended (Ended counts it).
	Rehome      bool
	RehomeDelay time.Duration
	// ServerName is the name the gateway's certificate carries; the host of
	// Addr when empty.
	ServerName string
	// RootCAs verifies the gateway's certificate.
	RootCAs *x509.CertPool
	// NodeIDs and Certs pair each simulated node with its client certificate.
	NodeIDs []string
	Certs   []tls.Certificate
	// Connecting bounds the sessions being opened at once (default 64): a
	// thundering herd of TLS handshakes measures nothing useful.
	Connecting int
	// ConnectTimeout bounds the whole connect phase (default 5 minutes).
	ConnectTimeout time.Duration
	// Logger receives progress; a null logger when nil.
	Logger hclog.Logger
}

// Fleet is N FakeDaemons, each holding a session over its own connection.
type Fleet struct {
	// Daemons are the simulated nodes, in NodeIDs order.
	Daemons []*fakedaemon.Daemon
	// ConnectTime is how long opening every session took.
	ConnectTime time.Duration

	logger hclog.Logger
	conns  []*grpc.ClientConn
	cancel context.CancelFunc
	wg     sync.WaitGroup
	// dial opens node i's connection to gateway k (of addrs).
	dial  func(i, k int) (*grpc.ClientConn, error)
	addrs []string
	cfg   FleetConfig

	// mu guards receipts, settles and ended.
	mu sync.Mutex
	// receipts are when commands first reached their nodes; settles when
	// the gateway first acknowledged their terminal updates.
	receipts, settles arrivals
	// ended counts sessions that ended before Close.
	ended int
	// homes is each node's gateway (an index of addrs); rehomes how long
	// each re-homed session took from its old session's end to the new
	// Welcome.
	homes   []int
	rehomes []time.Duration
}

// StartFleet opens one session per node and returns once every node holds a
// Welcome, or fails when one cannot connect.
func StartFleet(ctx context.Context, cfg FleetConfig) (*Fleet, error) {
	if len(cfg.NodeIDs) != len(cfg.Certs) {
		return nil, fmt.Errorf("fleet: %d node ids but %d certificates", len(cfg.NodeIDs), len(cfg.Certs))
	}
	if cfg.Connecting <= 0 {
		cfg.Connecting = 64
	}
	if cfg.ConnectTimeout <= 0 {
		cfg.ConnectTimeout = 5 * time.Minute
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	addrs := cfg.Addrs
	if len(addrs) == 0 {
		addrs = []string{cfg.Addr}
	}
	if cfg.RehomeDelay <= 0 {
		cfg.RehomeDelay = 250 * time.Millisecond
	}
	f := &Fleet{
		logger: cfg.Logger.Named("fleet"), cancel: cancel,
		receipts: newArrivals(), settles: newArrivals(),
		addrs: addrs, cfg: cfg, homes: make([]int, len(cfg.NodeIDs)),
	}
	f.dial = func(i, k int) (*grpc.ClientConn, error) {
		return grpc.NewClient(addrs[k%len(addrs)], append([]grpc.DialOption{grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{
			Certificates: []tls.Certificate{cfg.Certs[i]}, RootCAs: cfg.RootCAs, ServerName: cfg.ServerName, MinVersion: tls.VersionTLS13,
		}))}, sessiongrpc.DialOptions()...)...)
	}
	start := time.Now()
	sem := make(chan struct{}, cfg.Connecting)
	errs := make(chan error, len(cfg.NodeIDs))
	var connecting sync.WaitGroup
	cctx, ccancel := context.WithTimeout(ctx, cfg.ConnectTimeout)
	defer ccancel()
	for i, id := range cfg.NodeIDs {
		f.homes[i] = i % len(addrs)
		conn, err := f.dial(i, f.homes[i])
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("fleet: client for %s: %w", id, err)
		}
		f.conns = append(f.conns, conn)
		d := fakedaemon.New(id)
		d.OnCommand(f.received)
		d.OnTerminalAck(f.settled)
		f.Daemons = append(f.Daemons, d)
		select {
		case sem <- struct{}{}:
		case <-cctx.Done():
			f.Close()
			return nil, fmt.Errorf("fleet: connecting %d sessions: %w", len(cfg.NodeIDs), cctx.Err())
		}
		connecting.Add(1)
		f.wg.Add(1)
		ended := make(chan error, 1)
		go func() {
			defer f.wg.Done()
			f.runNode(runCtx, i, d, conn, ended)
		}()
		go func() {
			defer connecting.Done()
			defer func() { <-sem }()
			errs <- waitWelcome(cctx, d, ended)
		}()
		if (i+1)%1000 == 0 {
			f.logger.Info("connecting", "started", i+1, "of", len(cfg.NodeIDs))
		}
	}
	connecting.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			f.Close()
			return nil, err
		}
	}
	f.ConnectTime = time.Since(start)
	f.logger.Info("fleet connected", "sessions", len(f.Daemons), "took", f.ConnectTime)
	return f, nil
}

// waitWelcome waits for d's Welcome: the session is open. The fake daemon
// has no welcome hook, so it looks every few milliseconds, bounded by ctx.
func waitWelcome(ctx context.Context, d *fakedaemon.Daemon, ended <-chan error) error {
	t := time.NewTicker(5 * time.Millisecond)
	defer t.Stop()
	for d.Welcome() == nil {
		select {
		case err := <-ended:
			return fmt.Errorf("fleet: session of %s ended before Welcome: %w", d.NodeID, err)
		case <-ctx.Done():
			return fmt.Errorf("fleet: waiting for the Welcome of %s: %w", d.NodeID, ctx.Err())
		case <-t.C:
		}
	}
	return nil
}

// received is every daemon's command hook: it timestamps the first receipt.
func (f *Fleet) received(cmd *agentv1.Command) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.receipts.mark(cmd.GetId(), time.Now())
}

// settled is every daemon's terminal-acknowledgement hook: it timestamps the
// first.
func (f *Fleet) settled(commandID string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.settles.mark(commandID, time.Now())
}

// Expect returns a channel that receives the time the command first reached
// its node. Call it before the command's transaction commits.
func (f *Fleet) Expect(commandID string) <-chan time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.receipts.expect(commandID)
}

// ExpectSettled returns a channel that receives the time the gateway first
// acknowledged the command's terminal update to its node: it was stored
// (settled) by then. Call it before the command's transaction commits.
func (f *Fleet) ExpectSettled(commandID string) <-chan time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.settles.expect(commandID)
}

// Forget drops the expectations of a command (one that timed out).
func (f *Fleet) Forget(commandID string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.receipts.forget(commandID)
	f.settles.forget(commandID)
}

// arrivals are the first times events happened to commands, handed to
// whoever expects them: an event may come before its expectation.
type arrivals struct {
	waiters map[string]chan time.Time
	early   map[string]time.Time
}

func newArrivals() arrivals {
	return arrivals{waiters: map[string]chan time.Time{}, early: map[string]time.Time{}}
}

func (a arrivals) mark(id string, at time.Time) {
	if ch, ok := a.waiters[id]; ok {
		delete(a.waiters, id)
		ch <- at
		return
	}
	if _, seen := a.early[id]; !seen {
		a.early[id] = at
	}
}

func (a arrivals) expect(id string) <-chan time.Time {
	ch := make(chan time.Time, 1)
	if at, ok := a.early[id]; ok {
		delete(a.early, id)
		ch <- at
		return ch
	}
	a.waiters[id] = ch
	return ch
}

func (a arrivals) forget(id string) {
	delete(a.waiters, id)
	delete(a.early, id)
}

// Ended reports how many sessions ended on their own (the gateway closed
// them or the connection broke) since the fleet started.
func (f *Fleet) Ended() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.ended
}

// Close ends every session and connection and waits for them.
func (f *Fleet) Close() {
	f.cancel()
	for _, c := range f.conns {
		_ = c.Close()
	}
	f.wg.Wait()
}
