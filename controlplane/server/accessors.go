package server

import (
	"context"
	"net"
	"net/http"
	"time"

	"github.com/better-compute/commands/controlplane/commands/queue"
	"github.com/better-compute/commands/controlplane/commands/sweeper"
	"github.com/better-compute/commands/controlplane/front/gateway"
	"github.com/better-compute/commands/controlplane/front/join"
	"github.com/better-compute/commands/controlplane/trust/pki"
	"github.com/jackc/pgx/v5/pgxpool"
)

// The server's parts, for tests, the binaries and the modules, and its
// health endpoints.

// GatewayAddr is the gateway's bound address, nil when off.
func (s *Server) GatewayAddr() net.Addr {
	if s.gwLis == nil {
		return nil
	}
	return s.gwLis.Addr()
}

// CA is the node CA, nil when the gateway is off.
func (s *Server) CA() *pki.CA { return s.ca }

// Gateway is the node session server, nil when off.
func (s *Server) Gateway() *gateway.Gateway { return s.gateway }

// Join is the join service, nil when the gateway is off.
func (s *Server) Join() *join.Service { return s.join }

// Sweeper is the CommandSweeper, nil when disabled.
func (s *Server) Sweeper() *sweeper.Sweeper { return s.sweeper }

// NodeWakers are woken with a node id when the sweeper settles one of its
// commands; node controllers register here.
func (s *Server) NodeWakers() *sweeper.Wakers { return s.nodeWakers }

// WorkflowWakers are woken with a workflow id when the sweeper settles a
// command whose key is wf:<workflowId>:…; workflow engines register here.
func (s *Server) WorkflowWakers() *sweeper.Wakers { return s.workflowWakers }

// Queue is the server's command queue.
func (s *Server) Queue() *queue.Queue { return s.queue }

// GRPCAddr is the API's bound address.
func (s *Server) GRPCAddr() net.Addr { return s.grpcLis.Addr() }

// HTTPAddr is the health and metrics address, nil when off.
func (s *Server) HTTPAddr() net.Addr {
	if s.httpLis == nil {
		return nil
	}
	return s.httpLis.Addr()
}

// Pool is the server's database pool.
func (s *Server) Pool() *pgxpool.Pool { return s.pool }

// healthz says the process is alive.
func (s *Server) healthz(w http.ResponseWriter, _ *http.Request) {
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write([]byte("ok\n"))
}

// readyz says the server takes traffic: not stopping, and the database
// answers. A second line says whether commands are signed (signingState):
// unsigned is not unready, but an operator looking should see it.
func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	if s.stopping.Load() {
		http.Error(w, "shutting down", http.StatusServiceUnavailable)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	if err := s.pool.Ping(ctx); err != nil {
		http.Error(w, "database: "+err.Error(), http.StatusServiceUnavailable)
		return
	}
	_, _ = w.Write([]byte("ready\n"))
	s.writeSigningDetail(ctx, w)
}
