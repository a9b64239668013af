package main

import (
	"crypto"
	"fmt"

	"github.com/hashicorp/go-hclog"

	"github.com/better-compute/commands/bcd/batchcheck"
	"github.com/better-compute/commands/bcd/config"
	"github.com/better-compute/commands/bcd/daemon"
	"github.com/better-compute/commands/bcd/truststore"
	"github.com/better-compute/commands/internal/trust"
)

// nodeTrust is what `bcd run` verifies with and signs with: the trust
// bundle (trust.json, or the first from trustAnchors), checks 4 and 5 over
// it for the node the certificate names (check 5 with its ledger of
// consumed batch leaves and break-glass allowance, batches.json), the
// bounded clock they share, and the node key that signs attested results
// and AllocationBound statements.
type nodeTrust struct {
	store    *truststore.Store
	verifier *truststore.Verifier
	batches  *batchcheck.Checker
	clock    *trust.Clock
	key      crypto.Signer
}

// The daemon consumes what check 5 accepted a command on.
var _ daemon.BatchConsumer = (*batchcheck.Checker)(nil)

// openTrust opens the node's trust bundle in the state directory. nodeID
// is the node's own id, from its certificate when it joined: the audience
// a signed command must name. key is the node key (nil before join).
func openTrust(cfg config.Config, nodeID string, key crypto.Signer, logger hclog.Logger) (*nodeTrust, error) {
	anchors, err := loadAnchors(cfg.TrustAnchors)
	if err != nil {
		return nil, err
	}
	store, err := truststore.Open(cfg.StateDir, anchors, logger)
	if err != nil {
		return nil, err
	}
	clock := &trust.Clock{MaxSkew: cfg.MaxClockSkew.D()}
	if b := store.Bundle(); b != nil {
		// The bundle's issue time is a signed lower bound of the time.
		clock.ObserveSigned(b.IssuedAt)
	}
	batches, err := batchcheck.Open(cfg.StateDir, batchcheck.Config{Store: store, NodeID: nodeID, Clock: clock, Logger: logger})
	if err != nil {
		return nil, err
	}
	logger.Info("trust bundle", "version", store.Version(), "commands_signed", store.HasCommandSigningRoots(),
		"batch_quorum", batches.HasApproverKeys(), "anchors", len(anchors), "max_clock_skew", clock.MaxOffset())
	return &nodeTrust{
		store:    store,
		verifier: &truststore.Verifier{Store: store, NodeID: nodeID, Clock: clock},
		batches:  batches,
		clock:    clock,
		key:      key,
	}, nil
}

// signerOf is the node key of a joined node's TLS key pair.
func signerOf(j joined) (crypto.Signer, error) {
	if j.tls == nil || len(j.tls.Certificates) == 0 {
		return nil, nil
	}
	s, ok := j.tls.Certificates[0].PrivateKey.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("node key: %T cannot sign", j.tls.Certificates[0].PrivateKey)
	}
	return s, nil
}
