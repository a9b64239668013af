package api

import (
	"context"

	"github.com/better-compute/commands/controlplane/commands/queue"
	"github.com/better-compute/commands/controlplane/modules/remediation"
	"github.com/better-compute/commands/controlplane/modules/rollout"
	"github.com/better-compute/commands/internal/upgrade"
)

// ConditionReportContradicted is the node condition of a terminal report
// that contradicted the command's stored outcome (other than an upgrade's
// rollback, which is UpgradeRolledBack): the command keeps its first
// state, and the condition says what the node said later.
const ConditionReportContradicted = "ReportContradicted"

// platformConditions are the conditions the control plane adds to what the
// nodes report, by node id, in two statements for a whole page: the
// remediations' (RemediationEscalated) and the contradicting reports of the
// last 7 days (UpgradeRolledBack, ReportContradicted) that no later success
// of the same kind answered.
func platformConditions(ctx context.Context, db queue.DBTX, nodeIDs []string) (map[string][]remediation.Condition, error) {
	out, err := remediation.NodesConditions(ctx, db, nodeIDs)
	if err != nil {
		return nil, err
	}
	xs, err := queue.NodesContradictions(ctx, db, nodeIDs)
	if err != nil {
		return nil, err
	}
	for node, list := range xs {
		for _, x := range list {
			out[node] = append(out[node], contradictionCondition(x))
		}
	}
	return out, nil
}

// contradictionCondition shows a contradicting report as a condition.
func contradictionCondition(x queue.Contradiction) remediation.Condition {
	typ, reason := ConditionReportContradicted, x.ReportedReason
	if x.Kind == upgrade.KindName && x.ReportedState == queue.Failed && x.ReportedReason == upgrade.ReasonRolledBack {
		typ = rollout.ConditionUpgradeRolledBack
	}
	if reason == "" {
		reason = string(x.ReportedState)
	}
	stored := string(x.StoredState)
	if x.StoredReason != "" {
		stored += " (" + x.StoredReason + ")"
	}
	msg := x.Kind + " " + x.CommandID + " is stored " + stored + ", but the node reported it " + string(x.ReportedState)
	if x.ReportedReason != "" {
		msg += " (" + x.ReportedReason + ")"
	}
	if x.ReportedMessage != "" {
		msg += ": " + x.ReportedMessage
	}
	return remediation.Condition{Type: typ, Status: "True", Reason: reason, Message: msg, Since: x.ReportedAt}
}
