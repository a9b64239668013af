package gateway

import (
	"context"
	"encoding/json"

	"github.com/better-compute/commands/internal/upgrade"
	"github.com/better-compute/commands/sdk/kind"

	"github.com/jackc/pgx/v5"

	"github.com/better-compute/commands/controlplane/commands/queue"
	agentv1 "github.com/better-compute/commands/proto/bc/agent/v1"
)

// beginSession bumps the epoch and settles what the reconnect proves, in
// one transaction, before anything is replayed ("Hello first settles what
// the reconnect proves"): a new boot id or role ("a new boot or role on
// rejoin") completes in-flight self-terminating commands as succeeded with
// rebooted: true; a new journal id fails in-flight commands that are not
// retry-safe with journal-lost, since the daemon no longer knows whether
// they ran.
func (g *Gateway) beginSession(ctx context.Context, hello *agentv1.Hello, role string) (int64, error) {
	var epoch int64
	err := pgx.BeginFunc(ctx, g.pool, func(tx pgx.Tx) error {
		start, err := g.queue.StartSession(ctx, tx, queue.SessionHello{
			NodeID: hello.GetNodeId(), JournalID: hello.GetJournalId(), BootID: hello.GetBootId(), Role: role,
			TrustVersion: hello.GetTrustVersion(), DaemonVersion: hello.GetDaemonVersion(), Gateway: g.opts.Name,
		})
		if err != nil {
			return err
		}
		epoch = start.Epoch
		open, err := g.queue.ListOpen(ctx, tx, hello.GetNodeId())
		if err != nil {
			return err
		}
		for _, c := range open {
			if err := g.upgradeRejoining(ctx, tx, c, hello); err != nil {
				return err
			}
			t := settledByReconnect(c, start, hello, role)
			if t == nil {
				continue
			}
			if _, _, err := g.queue.Transition(ctx, tx, *t); err != nil {
				return err
			}
			g.logger.Info("settled by reconnect", "node_id", c.NodeID, "command_id", c.ID, "state", t.To, "reason", t.Reason)
		}
		return nil
	})
	return epoch, err
}

// settledByReconnect is the transition that the new session's ids prove for
// the in-flight command c, or nil when they prove nothing about it. A pending
// command never reached the node, so nothing is proved about it.
func settledByReconnect(c queue.Command, prev queue.SessionStart, hello *agentv1.Hello, role string) *queue.Transition {
	if c.State == queue.Pending {
		return nil
	}
	newBoot := prev.PrevBootID != "" && prev.PrevBootID != hello.GetBootId()
	newRole := prev.PrevRole != role
	newJournal := prev.PrevJournalID != "" && prev.PrevJournalID != hello.GetJournalId()
	switch {
	case c.Kind == upgrade.KindName:
		// daemon.upgrade restarts bcd on the same boot, and neither a new
		// boot nor the new daemon's version in Hello proves how it ends:
		// the new daemon may yet fail to rejoin and be rolled back. The
		// node reports the outcome itself: the new daemon once it wrote its
		// rejoin marker, the old one after a rollback (rolled-back), and
		// the rollout module fails it when the rejoin window passes with no
		// news (rejoin-timeout).
		return nil
	case (newBoot || newRole) && c.Flags.SelfTerminating:
		return &queue.Transition{CommandID: c.ID, NodeID: c.NodeID, To: queue.Succeeded, Reason: kind.ReasonRebooted, Rebooted: true}
	case newJournal && !c.Flags.RetrySafe:
		return &queue.Transition{CommandID: c.ID, NodeID: c.NodeID, To: queue.Failed, Reason: kind.ReasonJournalLost}
	}
	return nil
}

// upgradeRejoining records, as the progress of an in-flight daemon.upgrade,
// that its target version said Hello: the command stays open until the
// node reports how it ended, and an operator sees what it waits for.
func (g *Gateway) upgradeRejoining(ctx context.Context, tx pgx.Tx, c queue.Command, hello *agentv1.Hello) error {
	if c.Kind != upgrade.KindName || c.State == queue.Pending {
		return nil
	}
	target := upgradeTarget(c.Payload)
	if target == "" || hello.GetDaemonVersion() != target {
		return nil
	}
	b, err := json.Marshal(map[string]any{"percent": 95, "message": "bcd " + target + " said Hello; waiting for its rejoin marker (or the helper's rollback)"})
	if err != nil {
		return err
	}
	if _, err := g.queue.RecordProgress(ctx, tx, c.ID, 0, b); err != nil {
		return err
	}
	g.logger.Info("the upgrade's new daemon said Hello; the command waits for its outcome", "node_id", c.NodeID, "command_id", c.ID, "version", target)
	return nil
}

// upgradeTarget is a daemon.upgrade payload's targetVersion, "" when it
// has none.
func upgradeTarget(payload []byte) string {
	var p struct {
		TargetVersion string `json:"targetVersion"`
	}
	if json.Unmarshal(payload, &p) != nil {
		return ""
	}
	return p.TargetVersion
}
