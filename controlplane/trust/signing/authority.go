// Package signing is the control plane's command-signing authority at run
// time: it holds the root from pki.commandSigning, certifies its own worker
// keys for at most 24 hours and renews them before they expire, signs every
// command at enqueue and every node spec generation with the current worker
// key, and signs the trust bundle with the root. Only the process that
// queues commands (the API, a module, the sweeper's host) holds it; a
// gateway relays the stored signed bytes and holds no key.
package signing

import (
	"crypto/ed25519"
	"fmt"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/better-compute/commands/internal/trust"
)

// Options tune an Authority.
type Options struct {
	// Lifetime is a worker key's certificate lifetime; 24h when zero.
	Lifetime time.Duration
	// RenewBefore is how long before its expiry a worker key is replaced;
	// half the lifetime when zero, so every command is signed by a key with
	// at least that long to live, and the old key stays valid for what it
	// signed (overlap, no restart, nothing left unsigned).
	RenewBefore time.Duration
	// Now is the clock; time.Now when nil.
	Now    func() time.Time
	Logger hclog.Logger
}

// Authority signs with worker keys that its root certifies.
type Authority struct {
	root   ed25519.PrivateKey
	opts   Options
	logger hclog.Logger

	// lock guards worker, which is replaced on renewal.
	lock   sync.Mutex
	worker *trust.WorkerKey
}

// New returns an authority for root.
func New(root ed25519.PrivateKey, opts Options) (*Authority, error) {
	if len(root) != ed25519.PrivateKeySize {
		return nil, fmt.Errorf("command-signing root: not an Ed25519 private key")
	}
	if opts.Lifetime <= 0 {
		opts.Lifetime = trust.MaxWorkerKeyLifetime
	}
	if opts.Lifetime > trust.MaxWorkerKeyLifetime {
		return nil, fmt.Errorf("worker key lifetime %s is longer than %s", opts.Lifetime, trust.MaxWorkerKeyLifetime)
	}
	if opts.RenewBefore <= 0 || opts.RenewBefore >= opts.Lifetime {
		opts.RenewBefore = opts.Lifetime / 2
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = hclog.NewNullLogger()
	}
	a := &Authority{root: root, opts: opts, logger: opts.Logger.Named("signing")}
	if _, err := a.Worker(); err != nil {
		return nil, err
	}
	return a, nil
}

// Load reads the root from a PEM file (pki.commandSigning).
func Load(path string, opts Options) (*Authority, error) {
	root, err := trust.LoadEd25519PrivateKey(path)
	if err != nil {
		return nil, fmt.Errorf("pki.commandSigning: %w", err)
	}
	return New(root, opts)
}

// RootPublic is the root's public key.
func (a *Authority) RootPublic() ed25519.PublicKey { return a.root.Public().(ed25519.PublicKey) }

// Worker returns the current worker key, renewing it first when it is
// within RenewBefore of its expiry.
func (a *Authority) Worker() (*trust.WorkerKey, error) {
	now := a.opts.Now()
	a.lock.Lock()
	defer a.lock.Unlock()
	if a.worker != nil && now.Before(a.worker.NotAfter.Add(-a.opts.RenewBefore)) {
		return a.worker, nil
	}
	w, err := trust.NewWorkerKey(a.root, now, a.opts.Lifetime)
	if err != nil {
		return nil, fmt.Errorf("renewing the worker key: %w", err)
	}
	if a.worker != nil {
		a.logger.Info("worker key renewed", "old_key_id", a.worker.KeyIDShort(), "old_not_after", a.worker.NotAfter, "key_id", w.KeyIDShort(), "not_after", w.NotAfter)
	} else {
		a.logger.Info("worker key issued", "key_id", w.KeyIDShort(), "not_after", w.NotAfter, "root_key_id", trust.Ed25519KeyID(a.RootPublic()))
	}
	a.worker = w
	return w, nil
}

// Sign signs body for purpose p (a command or a node spec) and returns the
// signature and the worker key's certificate.
func (a *Authority) Sign(p trust.Purpose, body []byte) (sig, cert []byte, err error) {
	w, err := a.Worker()
	if err != nil {
		return nil, nil, err
	}
	return w.Sign(p, body), w.Cert, nil
}

// SignBundle signs a trust bundle with the root.
func (a *Authority) SignBundle(b trust.Bundle) ([]byte, error) { return trust.SignBundle(b, a.root) }
