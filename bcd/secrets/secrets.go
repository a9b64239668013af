// Package secrets is bcd's side of secretRefs. A command carries only the
// names of the secrets it needs; just before the run, Fetch makes a
// one-time HPKE key pair for the command, sends its public key in a
// SecretRequest over the session, and opens the values the control plane
// sealed to it. The values live in memory for the run only: they go to the
// plugin in the execute request and are wiped after it, and nothing here
// logs, journals or returns them.
package secrets

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/better-compute/commands/internal/sealed"
	agentv1 "github.com/better-compute/commands/proto/bc/agent/v1"
)

// Failure reasons a command gets when its secrets cannot be fetched.
const (
	// ReasonUnavailable: no session answered in time, or the control
	// plane holds no secrets key, or its store failed.
	ReasonUnavailable = "secrets-unavailable"
	// ReasonDenied: the control plane refused (the command does not name
	// the ref, or it is no longer live on this node).
	ReasonDenied = "secret-denied"
	// ReasonNotFound: the tenant has no such secret.
	ReasonNotFound = "secret-not-found"
)

// Error is a fetch failure with the reason the command fails with.
type Error struct {
	Reason  string
	Message string
}

func (e *Error) Error() string { return e.Message }

// SecretReason is the reason the command fails with.
func (e *Error) SecretReason() string { return e.Reason }

// Exchanger fetches a command's secrets over the session.
type Exchanger struct {
	nodeID string
	logger hclog.Logger
	// Resend is how often an unanswered request is sent again (a session
	// that broke meanwhile, a gateway that restarted); 3 s when 0.
	Resend time.Duration
	// Timeout bounds one Fetch; 2 min when 0.
	Timeout time.Duration

	// lock guards send and pending.
	lock    sync.Mutex
	send    func(*agentv1.NodeMessage) bool
	pending map[string]chan *agentv1.SecretResponse
}

// New returns an Exchanger for nodeID; SetSender gives it the session.
func New(nodeID string, logger hclog.Logger) *Exchanger {
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	return &Exchanger{nodeID: nodeID, logger: logger.Named("secrets"), pending: map[string]chan *agentv1.SecretResponse{}}
}

// SetSender sets how requests go out: the session client's send, which
// reports false while no session is open.
func (x *Exchanger) SetSender(send func(*agentv1.NodeMessage) bool) {
	x.lock.Lock()
	defer x.lock.Unlock()
	x.send = send
}

// Deliver hands an answer to the Fetch waiting for it; one nobody waits for
// (a duplicate, a late answer) is dropped.
func (x *Exchanger) Deliver(resp *agentv1.SecretResponse) {
	x.lock.Lock()
	ch := x.pending[resp.GetRequestId()]
	x.lock.Unlock()
	if ch == nil {
		return
	}
	select {
	case ch <- resp:
	default:
	}
}

// Fetch returns the values of refs for commandID, exchanged under a fresh
// one-time key. The caller wipes them (sealed.Wipe) once the run is over.
func (x *Exchanger) Fetch(ctx context.Context, commandID string, refs []string) (map[string][]byte, error) {
	key, err := sealed.NewKey()
	if err != nil {
		return nil, &Error{Reason: ReasonUnavailable, Message: err.Error()}
	}
	var idb [12]byte
	_, _ = rand.Read(idb[:])
	reqID := commandID + "/" + hex.EncodeToString(idb[:])
	ch := make(chan *agentv1.SecretResponse, 1)
	x.lock.Lock()
	x.pending[reqID] = ch
	x.lock.Unlock()
	defer func() {
		x.lock.Lock()
		delete(x.pending, reqID)
		x.lock.Unlock()
	}()
	msg := &agentv1.NodeMessage{Msg: &agentv1.NodeMessage_SecretRequest{SecretRequest: &agentv1.SecretRequest{
		RequestId: reqID, CommandId: commandID, Refs: refs, PublicKey: key.PublicKey(), KemId: sealed.KEMID,
	}}}
	timeout, resend := x.Timeout, x.Resend
	if timeout <= 0 {
		timeout = 2 * time.Minute
	}
	if resend <= 0 {
		resend = 3 * time.Second
	}
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(resend)
	defer tick.Stop()
	sent := x.trySend(msg)
	for {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-deadline.C:
			why := "the control plane did not answer the secret exchange within " + timeout.String()
			if !sent {
				why = "no session to the control plane for " + timeout.String() + ": the secrets could not be fetched"
			}
			return nil, &Error{Reason: ReasonUnavailable, Message: why}
		case <-tick.C:
			sent = x.trySend(msg) || sent
		case resp := <-ch:
			return x.open(key, commandID, refs, resp)
		}
	}
}

func (x *Exchanger) trySend(m *agentv1.NodeMessage) bool {
	x.lock.Lock()
	send := x.send
	x.lock.Unlock()
	return send != nil && send(m)
}

func (x *Exchanger) open(key *sealed.Key, commandID string, refs []string, resp *agentv1.SecretResponse) (map[string][]byte, error) {
	if resp.GetError() != "" {
		reason := ReasonUnavailable
		switch resp.GetError() {
		case ReasonDenied, ReasonNotFound:
			reason = resp.GetError()
		}
		x.logger.Warn("secret exchange refused", "command_id", commandID, "refs", refs, "code", resp.GetError(), "why", resp.GetMessage())
		return nil, &Error{Reason: reason, Message: resp.GetMessage()}
	}
	out := make(map[string][]byte, len(refs))
	fail := func(format string, args ...any) (map[string][]byte, error) {
		for _, v := range out {
			sealed.Wipe(v)
		}
		return nil, &Error{Reason: ReasonUnavailable, Message: fmt.Sprintf(format, args...)}
	}
	for _, s := range resp.GetSecrets() {
		v, err := key.Open(x.nodeID, commandID, s.GetRef(), s.GetSealed())
		if err != nil {
			return fail("%v", err)
		}
		out[s.GetRef()] = v
	}
	for _, r := range refs {
		if _, ok := out[r]; !ok {
			return fail("the answer carries no value for secretRef %q", r)
		}
	}
	x.logger.Info("secrets fetched for a command", "command_id", commandID, "refs", refs)
	return out, nil
}
