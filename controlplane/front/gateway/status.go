package gateway

import (
	"context"
	"encoding/json"

	"github.com/better-compute/commands/controlplane/internal/dbhealth"
	agentv1 "github.com/better-compute/commands/proto/bc/agent/v1"
)

// status stores what the node reported about itself: the inventory and its
// conditions, in the form the API shows. The node sends a NodeStatus only
// when something changed, so one that finds the database away is held (the
// latest, keeping an earlier inventory when the latest has none) and
// stored with the held reports.
func (s *session) status(ctx context.Context, st *agentv1.NodeStatus) error {
	var inv json.RawMessage
	if len(st.GetInventory()) > 0 && json.Valid(st.GetInventory()) {
		inv = st.GetInventory()
	}
	conds := make([]map[string]any, 0, len(st.GetConditions()))
	for _, c := range st.GetConditions() {
		// The API shows a condition's status as "True" or "False", as
		// Kubernetes does; store it in that form.
		v := "False"
		if c.GetStatus() {
			v = "True"
		}
		m := map[string]any{"type": c.GetType(), "status": v, "reason": c.GetReason(), "message": c.GetMessage()}
		if c.GetSince() != nil {
			m["since"] = c.GetSince().AsTime()
		}
		conds = append(conds, m)
	}
	cb, err := json.Marshal(conds)
	if err != nil {
		s.logger.Warn("node conditions do not encode", "error", err)
		return nil
	}
	err = s.g.queue.RecordNodeStatus(ctx, s.g.pool, s.id.NodeID, inv, cb)
	if err != nil && ctx.Err() == nil && dbhealth.Transient(err) {
		s.holdStatus(st)
	}
	return s.dbErr(ctx, "storing the node status", err)
}

// holdStatus keeps st for the retry of held reports.
func (s *session) holdStatus(st *agentv1.NodeStatus) {
	if prev := s.held.status; prev != nil && len(st.GetInventory()) == 0 && len(prev.GetInventory()) > 0 {
		st = &agentv1.NodeStatus{Inventory: prev.GetInventory(), Conditions: st.GetConditions()}
	}
	s.held.status = st
	s.logger.Debug("node status held until the database returns", "conditions", len(st.GetConditions()))
	if s.held.timer == nil {
		s.held.arm()
	}
}
