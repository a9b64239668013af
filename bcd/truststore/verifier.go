package truststore

import (
	"bytes"
	"fmt"

	"github.com/better-compute/commands/bcd/accept"
	"github.com/better-compute/commands/internal/trust"
)

// Verifier is check 4 on the node (accept.Trust): once the bundle holds
// command-signing roots, or from the start on a node with trust anchors, a
// command verifies only when its worker key chains to a root in the bundle
// (the anchors, before there is one: Store.Verifying) that is valid now,
// its certificate is within its window, its signature is over the exact
// bytes received, and its audience is NodeID, the node's own id from its
// certificate.
type Verifier struct {
	Store *Store
	// NodeID is the node's id as its certificate names it.
	NodeID string
	// Clock is the node's bounded view of server time; a verified command's
	// signing time raises its floor.
	Clock *trust.Clock

	// certs remembers the worker-key certificates verified against the
	// bundle held, so each command costs one signature check, not two.
	certs trust.WorkerCache
}

var _ accept.Trust = (*Verifier)(nil)

// HasCommandSigningRoots reports whether commands must be signed.
func (v *Verifier) HasCommandSigningRoots() bool { return v.Store.HasCommandSigningRoots() }

// VerifyCommand checks cmd's envelope. The fields the daemon runs (id, node,
// kind, payload, deadline, generation, batch) must be the signed ones: cmd
// is decoded from the envelope's bytes, and this checks it field by field
// against what verified, so a caller that built cmd another way cannot run
// anything unsigned.
func (v *Verifier) VerifyCommand(cmd accept.Command) error {
	c, err := v.certs.VerifyCommand(v.Store.Verifying(), cmd.Envelope, v.NodeID, v.Clock.ServerNow())
	if err != nil {
		return err
	}
	switch {
	case c.GetId() != cmd.ID:
		return fmt.Errorf("%w: the signed command is %s, not %s", trust.ErrBadSignature, c.GetId(), cmd.ID)
	case c.GetKind() != cmd.Kind:
		return fmt.Errorf("%w: the signed kind is %s, not %s", trust.ErrBadSignature, c.GetKind(), cmd.Kind)
	case !bytes.Equal(c.GetPayload(), cmd.Payload):
		return fmt.Errorf("%w: the payload is not the signed one", trust.ErrBadSignature)
	case c.GetMinGeneration() != cmd.MinGeneration || c.GetBatchId() != cmd.BatchID:
		return fmt.Errorf("%w: the generation or batch is not the signed one", trust.ErrBadSignature)
	case c.GetNotAfter() == nil || !c.GetNotAfter().AsTime().Equal(cmd.NotAfter):
		return fmt.Errorf("%w: not_after is not the signed one", trust.ErrBadSignature)
	}
	if c.GetCreatedAt() != nil {
		v.Clock.ObserveSigned(c.GetCreatedAt().AsTime())
	}
	return nil
}
