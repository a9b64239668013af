package session

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/better-compute/commands/bcd/conditions"
	"github.com/better-compute/commands/internal/trust"
	agentv1 "github.com/better-compute/commands/proto/bc/agent/v1"
	"github.com/better-compute/commands/sdk/kind"
)

// errUnsignedSpec refuses a spec without a signed statement once the trust
// bundle holds roots.
var errUnsignedSpec = errors.New("the node spec is unsigned and the trust bundle holds command-signing roots")

// spec applies a node spec the gateway pushed, or reports why not. Once the
// trust bundle holds roots the node applies only what a worker key the
// roots certify signed for it ("the daemon verifies them before applying a
// spec"): the signed statement's spec and generation, never the unsigned
// fields beside it. A generation below the applied one is never applied
// (specs only move forward), and is reported as stale, not as applied.
func (c *Client) spec(sp *agentv1.Spec) {
	gen, doc, err := c.verifySpec(sp)
	if err != nil {
		c.specNotApplied(conditions.ReasonUnverified, sp.GetGeneration(), fmt.Sprintf("node spec generation %d does not verify: %v", sp.GetGeneration(), err))
		return
	}
	st := c.d.State()
	applied, err := st.ApplySpec(gen, doc)
	if err != nil {
		c.specNotApplied(conditions.ReasonError, gen, fmt.Sprintf("node spec generation %d: %v", gen, err))
		return
	}
	have := st.Generation()
	if !applied && gen < have {
		c.specNotApplied(conditions.ReasonStale, gen, fmt.Sprintf("node spec generation %d is older than the applied generation %d", gen, have))
		return
	}
	c.specApplied(have)
	if !applied {
		c.logger.Debug("node spec generation already applied", "generation", gen)
		return
	}
	c.logger.Info("node spec applied", "generation", gen, "signed", c.hasRoots())
	c.sendAllocationBounds(gen, doc)
	c.kickStatus()
}

// verifySpec returns the generation and document to apply: the signed
// statement's once the bundle holds roots (or the node has trust anchors),
// the Spec's own fields before.
func (c *Client) verifySpec(sp *agentv1.Spec) (int64, json.RawMessage, error) {
	if !c.hasRoots() {
		return sp.GetGeneration(), sp.GetSpec(), nil
	}
	if len(sp.GetSigned()) == 0 {
		return 0, nil, errUnsignedSpec
	}
	s, err := trust.VerifySpec(c.cfg.Trust.Verifying(), sp.GetWorkerCert(), sp.GetSigned(), sp.GetSignature(), c.cfg.NodeID, c.d.Clock().ServerNow())
	if err != nil {
		return 0, nil, err
	}
	if s.Generation != sp.GetGeneration() {
		return 0, nil, fmt.Errorf("%w: the signed statement is generation %d, the Spec says %d", trust.ErrBadSignature, s.Generation, sp.GetGeneration())
	}
	return s.Generation, s.Spec, nil
}

func (c *Client) specApplied(have int64) {
	if c.own.put(kind.Condition{Type: conditions.TypeNodeSpec, Status: true, Reason: conditions.ReasonApplied,
		Message: fmt.Sprintf("node spec generation %d applied", have)}) {
		c.kickStatus()
	}
}

func (c *Client) specNotApplied(code string, gen int64, msg string) {
	c.logger.Warn("node spec not applied", "generation", gen, "applied_generation", c.d.State().Generation(), "reason", code, "why", msg)
	if c.own.put(kind.Condition{Type: conditions.TypeNodeSpec, Reason: code, Message: msg + "; the applied spec is kept"}) {
		c.kickStatus()
	}
}
