// Package batchcheck is check 5 on the node, the destructive-batch quorum
// (accept.Batches): "with approver keys, a destructive command outside an
// approved batch" is refused, BATCH_UNAPPROVED or UNBATCHED_LIMIT.
//
// A batched command verifies when the approval in its envelope carries the
// signatures of ApprovalThreshold distinct approver keys of the node's own
// trust bundle (the requester's never counts), is within its deadline, and
// the inclusion proof puts the leaf the node computes itself (its own id,
// the command's kind, the SHA-256 of the payload it received) under the
// approved root; and when no other command consumed that leaf. An unbatched
// destructive command passes on the break-glass allowance
// (unbatchedDestructivePerHour), a sliding hour; 0 allows none.
//
// What accepted commands consume (each batch leaf once, the allowance) is
// kept in the state directory (batches.json, synced) before the command
// runs, so it survives a restart; a leaf is forgotten once its batch's
// deadline has passed, when the approval no longer verifies anyway.
package batchcheck

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/google/renameio/v2"
	"github.com/hashicorp/go-hclog"

	"github.com/better-compute/commands/bcd/accept"
	"github.com/better-compute/commands/bcd/truststore"
	"github.com/better-compute/commands/internal/fsutil"
	"github.com/better-compute/commands/internal/trust"
)

// Errors of check 5 beside trust.VerifyBatch's.
var (
	// ErrNoApproval: the command names a batch, its envelope carries no
	// approval.
	ErrNoApproval = errors.New("the command names a batch but carries no approval")
	// ErrLeafConsumed: another command already ran on the leaf.
	ErrLeafConsumed = errors.New("the batch leaf was consumed by another command")
	// ErrBehindLedger: the batch's deadline is behind the ledger's clock,
	// so its leaves may have been forgotten.
	ErrBehindLedger = errors.New("the batch's deadline is behind what this node's batch ledger remembers")
	// ErrAllowanceSpent: the break-glass allowance has no room left.
	ErrAllowanceSpent = errors.New("the break-glass allowance (unbatchedDestructivePerHour) is spent")
	// ErrLedgerUnreadable: batches.json does not decode; check 5 refuses
	// every destructive command until it is restored or removed.
	ErrLedgerUnreadable = errors.New("the batch ledger is unreadable")
)

// Config is what a Checker verifies with.
type Config struct {
	// Store is the node's trust bundle: its approvers, threshold and
	// break-glass allowance.
	Store *truststore.Store
	// NodeID is the node's id as its certificate names it: the subject of
	// the leaf the node computes.
	NodeID string
	// Clock is the node's bounded view of server time, in which batch
	// deadlines are judged; time.Now when nil.
	Clock *trust.Clock
	// Logger logs what is consumed and refused.
	Logger hclog.Logger
}

// Checker is check 5 over the node's trust bundle, with the ledger of what
// accepted commands consumed. Its methods are safe for concurrent use.
type Checker struct {
	cfg    Config
	path   string
	logger hclog.Logger

	// lock guards led and broken; it is held while a consumption is
	// persisted, so two commands never take one leaf or the last of the
	// allowance.
	lock   sync.Mutex
	led    *ledger
	broken error
}

var _ accept.Batches = (*Checker)(nil)

// Open reads the ledger in stateDir, if any. A ledger that does not decode
// is not an error here: the Checker then refuses every destructive command
// (fail closed) and says why, while the node serves everything else. An
// error is returned only when the file cannot be read at all.
func Open(stateDir string, cfg Config) (*Checker, error) {
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	c := &Checker{cfg: cfg, path: filepath.Join(stateDir, FileName), logger: cfg.Logger.Named("batches"), led: newLedger()}
	b, err := os.ReadFile(c.path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return c, nil
	case err != nil:
		return nil, fmt.Errorf("reading the batch ledger: %w", err)
	}
	led, err := decodeLedger(b)
	if err != nil {
		c.broken = fmt.Errorf("%w: %s: %w (restore it; or remove it once every batch it could name is past its deadline)", ErrLedgerUnreadable, c.path, err)
		c.logger.Error("destructive commands are refused until the batch ledger is restored or removed", "error", c.broken)
		return c, nil
	}
	c.led = led
	return c, nil
}

func (c *Checker) now() time.Time {
	if c.cfg.Clock != nil {
		return c.cfg.Clock.ServerNow()
	}
	return time.Now()
}

// HasApproverKeys reports whether the node's trust bundle holds approver
// keys; without them a batch is recorded for audit only.
func (c *Checker) HasApproverKeys() bool {
	b := c.cfg.Store.Bundle()
	return b != nil && len(b.Approvers) > 0
}

// VerifyApproval checks that cmd is in an approved batch, against the
// node's own bundle and leaf, and that no other command consumed its leaf.
// It consumes nothing: Consume does, once the command is accepted.
func (c *Checker) VerifyApproval(cmd accept.Command) error {
	bc, err := c.batchCheck(cmd)
	if err != nil {
		return err
	}
	st, err := trust.VerifyBatch(c.cfg.Store.Bundle(), bc, c.now())
	if err != nil {
		return err
	}
	c.lock.Lock()
	defer c.lock.Unlock()
	if c.broken != nil {
		return c.broken
	}
	return c.led.available(leafKey{cmd.BatchID, bc.LeafIndex}, st.NotAfter, cmd.ID)
}

// batchCheck is what trust.VerifyBatch checks of cmd: the envelope's
// approval and proof, and the node's own leaf.
func (c *Checker) batchCheck(cmd accept.Command) (trust.BatchCheck, error) {
	env := cmd.Envelope
	if env == nil || len(env.GetBatchApproval()) == 0 {
		return trust.BatchCheck{}, ErrNoApproval
	}
	if env.GetLeafIndex() < 0 {
		return trust.BatchCheck{}, fmt.Errorf("%w: leaf index %d", trust.ErrNotInBatch, env.GetLeafIndex())
	}
	// The payload bytes as received (check 4 made them the signed ones),
	// never a digest or a leaf hash the envelope could carry; digested over
	// their canonical JSON, as the control plane checks a leaf's binding.
	return trust.BatchCheck{
		Approval: env.GetBatchApproval(), LeafIndex: uint64(env.GetLeafIndex()), Proof: env.GetInclusionProof(),
		BatchID: cmd.BatchID, NodeID: c.cfg.NodeID, Kind: cmd.Kind, PayloadSHA256: trust.PayloadDigest(cmd.Payload),
	}, nil
}

// available reports why commandID may not run on leaf k of a batch with
// deadline notAfter: another command consumed it, or the ledger may have
// forgotten the batch. The same command (a redelivery after a crash before
// it was journaled) may.
func (l *ledger) available(k leafKey, notAfter time.Time, commandID string) error {
	if prev, ok := l.leaves[k]; ok && prev.CommandID != commandID {
		return fmt.Errorf("%w: leaf %d of batch %s ran %s", ErrLeafConsumed, k.index, k.batch, prev.CommandID)
	}
	if !notAfter.After(l.horizon()) {
		return fmt.Errorf("%w (deadline %s)", ErrBehindLedger, notAfter.UTC().Format(time.RFC3339))
	}
	return nil
}

// UnbatchedAllowed reports whether the break-glass allowance has room for
// one more unbatched destructive command at now.
func (c *Checker) UnbatchedAllowed(now time.Time) bool {
	limit := c.allowance()
	c.lock.Lock()
	defer c.lock.Unlock()
	if c.broken != nil || limit <= 0 {
		return false
	}
	used, _ := c.led.usedSince(c.led.now(now).Add(-window), "")
	return used < limit
}

func (c *Checker) allowance() int {
	if b := c.cfg.Store.Bundle(); b != nil {
		return b.UnbatchedDestructivePerHour
	}
	return 0
}

// Consume records what accepted command cmd uses, before it runs: its batch
// leaf, or (unbatched) one of the allowance. It checks again under the
// lock, so of two commands on one leaf, or for the last of the allowance,
// one is refused: code is then BATCH_UNAPPROVED or UNBATCHED_LIMIT and err
// says why. With code "" an error means the ledger could not be persisted
// and the command must not run. A command already recorded (a redelivery)
// consumes nothing more.
func (c *Checker) Consume(cmd accept.Command, unbatched bool, now time.Time) (accept.Code, error) {
	code := accept.BatchUnapproved
	if unbatched {
		code = accept.UnbatchedLimit
	}
	var k leafKey
	var notAfter time.Time
	if !unbatched {
		// Verified by VerifyApproval from these very bytes: only the
		// deadline is read again, for the ledger to know when to forget.
		bc, err := c.batchCheck(cmd)
		if err != nil {
			return code, err
		}
		st, err := statementOf(bc.Approval)
		if err != nil {
			return code, err
		}
		k, notAfter = leafKey{cmd.BatchID, bc.LeafIndex}, st.NotAfter
	}
	limit := c.allowance()

	c.lock.Lock()
	defer c.lock.Unlock()
	if c.broken != nil {
		return code, c.broken
	}
	next := c.led.advance(now)
	if unbatched {
		used, found := next.usedSince(next.clock.Add(-window), cmd.ID)
		if found {
			return "", nil
		}
		if used >= limit {
			return code, fmt.Errorf("%w: %d of %d used in the last hour", ErrAllowanceSpent, used, limit)
		}
		next.unbatched = append(next.unbatched, unbatchedUse{CommandID: cmd.ID, At: next.clock})
	} else {
		if err := next.available(k, notAfter, cmd.ID); err != nil {
			return code, err
		}
		if _, found := next.leaves[k]; found {
			return "", nil
		}
		next.leaves[k] = consumedLeaf{BatchID: k.batch, LeafIndex: k.index, CommandID: cmd.ID, NotAfter: notAfter}
	}
	if err := c.persist(next); err != nil {
		return "", err
	}
	c.led = next
	if unbatched {
		c.logger.Warn("break-glass allowance used: an unbatched destructive command", "command_id", cmd.ID, "kind", cmd.Kind,
			"used", len(next.unbatched), "per_hour", limit)
	} else {
		c.logger.Info("batch leaf consumed", "command_id", cmd.ID, "kind", cmd.Kind, "batch_id", k.batch, "leaf_index", k.index)
	}
	return "", nil
}

// statementOf reads the statement of an approval's wire form.
func statementOf(approval []byte) (trust.BatchStatement, error) {
	s, err := trust.DecodeSigned(approval)
	if err != nil {
		return trust.BatchStatement{}, fmt.Errorf("batch approval: %w", err)
	}
	return trust.DecodeBatchStatement(s.Body)
}

// persist writes l over the ledger file, synced, the directory too, so the
// consumption is on disk before the command is journaled and run. The
// caller holds lock.
func (c *Checker) persist(l *ledger) error {
	b, err := l.encode()
	if err != nil {
		return err
	}
	dir := filepath.Dir(c.path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("persisting the batch ledger: %w", err)
	}
	if err := renameio.WriteFile(c.path, b, 0o600); err != nil {
		return fmt.Errorf("persisting the batch ledger: %w", err)
	}
	if err := fsutil.SyncDir(dir); err != nil {
		return fmt.Errorf("persisting the batch ledger: %w", err)
	}
	return nil
}
