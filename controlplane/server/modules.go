package server

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/better-compute/commands/controlplane/kinds"
	"github.com/better-compute/commands/controlplane/metal"
	"github.com/better-compute/commands/controlplane/modules"
)

// startModules loads the modules: every process installs their settle hook
// (whichever replica settles a command records its owner's wake) and
// registers their kinds; the modules component runs them (runModules).
func (s *Server) startModules(cfg Config, reg *kinds.Registry) error {
	h, err := modules.NewHost(s.pool, s.queue, reg, modules.HostOptions{Logger: s.logger}, s.moduleList(cfg)...)
	if err != nil {
		return fmt.Errorf("modules: %w", err)
	}
	s.modules = h
	return nil
}

// moduleList is the modules this server loads.
func (s *Server) moduleList(Config) []modules.Module {
	return []modules.Module{metal.Module{Pool: s.pool, Queue: s.queue}}
}

// Modules is the module host.
func (s *Server) Modules() *modules.Host { return s.modules }

// runModules runs the module host until ctx ends when this process runs the
// modules component; the channel closes once it stopped.
func (s *Server) runModules(ctx context.Context) <-chan struct{} {
	done := make(chan struct{})
	if !s.cfg.Runs(ComponentModules) {
		close(done)
		return done
	}
	go func() {
		defer close(done)
		if err := s.modules.Run(ctx); err != nil {
			s.logger.Error("modules stopped", "error", err)
		}
	}()
	return done
}

// sessionTouchEvery is how often a gateway marks the sessions it holds as
// seen (nodes.session_seen_at): the reconciler skips a node whose session
// it has not seen for a few of these.
const sessionTouchEvery = 15 * time.Second

// touch marks the sessions this gateway holds as seen, every
// sessionTouchEvery, in one statement.
func (n *nodeSessions) touch(ctx context.Context, pool *pgxpool.Pool) {
	t := time.NewTicker(sessionTouchEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		held := n.held()
		if len(held) == 0 {
			continue
		}
		if _, err := pool.Exec(ctx, `UPDATE nodes SET session_seen_at = now() WHERE id = ANY($1)`, held); err != nil && ctx.Err() == nil {
			n.logger.Debug("marking held sessions as seen", "error", err)
		}
	}
}
