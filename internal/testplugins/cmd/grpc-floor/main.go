// Command grpc-floor is a bare gRPC server (the health service) on the unix
// socket named by its one argument: the floor that a plugin's cold start is
// measured against, a Go binary that serves gRPC and nothing else. Like a
// go-plugin handshake, it prints one line to stdout once it listens.
package main

import (
	"net"
	"os"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

func main() {
	if len(os.Args) != 2 {
		os.Stderr.WriteString("usage: grpc-floor SOCKET\n")
		os.Exit(2)
	}
	ln, err := net.Listen("unix", os.Args[1])
	if err != nil {
		os.Stderr.WriteString(err.Error() + "\n")
		os.Exit(1)
	}
	os.Stdout.WriteString("ready\n")
	s := grpc.NewServer()
	healthpb.RegisterHealthServer(s, health.NewServer())
	_ = s.Serve(ln)
}
