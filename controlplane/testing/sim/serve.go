package sim

import (
	"crypto/tls"
	"fmt"
	"net"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/better-compute/commands/controlplane/trust/pki"
	"github.com/better-compute/commands/internal/sessiongrpc"
	agentv1 "github.com/better-compute/commands/proto/bc/agent/v1"
)

// Serve serves a Session server (the gateway, or a bare stand-in that
// measures a floor) over mTLS on a loopback port, with a serving certificate
// from ca and client certificates verified against it, as the control plane
// does. It returns the address and a stop function.
func Serve(srv agentv1.SessionServer, ca *pki.CA) (addr string, stop func(), err error) {
	return ServeOn(srv, ca, "127.0.0.1:0")
}

// ServeOn is Serve on a given address: a gateway started again where it
// stopped, as a restarted process behind a load balancer.
func ServeOn(srv agentv1.SessionServer, ca *pki.CA, listen string) (addr string, stop func(), err error) {
	certPEM, keyPEM, err := ca.IssueServer("127.0.0.1")
	if err != nil {
		return "", nil, fmt.Errorf("serving certificate: %w", err)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return "", nil, fmt.Errorf("serving key pair: %w", err)
	}
	gs := grpc.NewServer(append([]grpc.ServerOption{grpc.Creds(credentials.NewTLS(&tls.Config{
		Certificates: []tls.Certificate{cert}, ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: ca.Pool(), MinVersion: tls.VersionTLS13,
	}))}, sessiongrpc.ServerOptions()...)...)
	agentv1.RegisterSessionServer(gs, srv)
	lis, err := net.Listen("tcp", listen)
	if err != nil {
		return "", nil, fmt.Errorf("listening: %w", err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = gs.Serve(lis)
	}()
	return lis.Addr().String(), func() { gs.Stop(); <-done }, nil
}
