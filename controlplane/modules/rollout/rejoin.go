package rollout

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/better-compute/commands/controlplane/modules"
)

// ExpireRejoins fails, with rejoin-timeout, each upgrade whose command is
// still in flight although its new daemon said Hello (the node's session
// reports the target version) longer ago than the rejoin window plus
// m.RejoinGrace: the node's helper rolls back when the window passes and
// the old daemon reports that at once, so this much silence means neither
// will come ("the rejoin window passes with no news"). The settle wakes the
// module, which counts the failure. A report that comes later anyway is
// stored beside it (a modules.Contradiction) and acted on. It returns how
// many it failed.
func (m *Module) ExpireRejoins(ctx context.Context) (int, error) {
	// The upgrades whose new daemon said Hello longer ago than the window
	// and the grace, from the module's own rows and the nodes; which of
	// their commands are still in flight is the queue's to say.
	rows, err := m.mc.Pool().Query(ctx, `SELECT rn.command_id, rn.node_id, rn.target_version, n.session_opened_at, r.rejoin_window_seconds
		FROM rollout_nodes rn
		JOIN rollouts r ON r.tenant_id = rn.tenant_id AND r.pool = rn.pool AND r.generation = rn.generation
		JOIN nodes n ON n.id = rn.node_id
		WHERE rn.state = 'upgrading' AND n.daemon_version = rn.target_version
		  AND n.session_opened_at < now() - r.rejoin_window_seconds * interval '1 second' - $1 * interval '1 microsecond'`,
		m.RejoinGrace.Microseconds())
	if err != nil {
		return 0, fmt.Errorf("listing upgrades past their rejoin window: %w", err)
	}
	type silent struct {
		cmd, node, version string
		hello              time.Time
		window             int
	}
	list, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (silent, error) {
		var s silent
		return s, row.Scan(&s.cmd, &s.node, &s.version, &s.hello, &s.window)
	})
	if err != nil {
		return 0, fmt.Errorf("listing upgrades past their rejoin window: %w", err)
	}
	refs := make([]modules.CommandRef, 0, len(list))
	for _, s := range list {
		refs = append(refs, modules.CommandRef{NodeID: s.node, CommandID: s.cmd})
	}
	inFlight, err := m.mc.Commands().InFlight(ctx, m.mc.Pool(), refs)
	if err != nil {
		return 0, fmt.Errorf("listing upgrades past their rejoin window: %w", err)
	}
	n := 0
	for _, s := range list {
		if !inFlight[s.cmd] {
			continue
		}
		msg := fmt.Sprintf("bcd %s said Hello at %s but wrote no rejoin marker, and no rollback was reported, within the rejoin window (%ds) and %s after it",
			s.version, s.hello.UTC().Format(time.RFC3339), s.window, m.RejoinGrace)
		_, changed, err := m.mc.Commands().Fail(ctx, m.mc.Pool(), s.node, s.cmd, ReasonRejoinTimeout, msg)
		if err != nil {
			return n, fmt.Errorf("failing the upgrade of %s: %w", s.node, err)
		}
		if changed {
			n++
			m.logger.Warn("an upgrade's new daemon stayed silent past the rejoin window", "node_id", s.node, "command_id", s.cmd, "version", s.version)
		}
	}
	return n, nil
}
