// Package sessiongrpc holds the gRPC transport settings that both ends of a
// node session use: the gateway (bc-server) serves with ServerOptions and
// bcd (and the fleet simulator) dials with DialOptions.
//
// Why it exists: a session is one long-lived HTTP/2 stream that is quiet
// most of the time and carries small messages (a command, its acked,
// running and result reports, their acknowledgements). With gRPC's default
// dynamic flow control, every quiet-to-busy turn of such a stream makes the
// receiver send a bandwidth-estimation PING and the sender answer it: two
// more writes and two more reads, each a system call and a TLS record, per
// command and per side, that carry no command. Over a fan-out to 10,000
// nodes, fixed windows took the gateway's CPU from about 4.3 s to 3.3 s and
// the simulator's from 2.3 s to 1.6 s (BenchmarkSessions, runs alternated).
// The estimate buys nothing here: the window it would grow is already far
// larger than anything a session sends at once. Static windows turn it off.
package sessiongrpc

import "google.golang.org/grpc"

// Window is the static HTTP/2 flow-control window of a session's stream and
// of its connection (each end's receive buffer may hold this much unread).
// It is 16 times gRPC's initial 64 KiB and hundreds of times a usual command
// or report, so those never wait on a window update; a larger message (up
// to gRPC's 4 MiB limit) still flows, with window updates as it goes. The
// bytes are not reserved, only allowed.
const Window = 1 << 20

// ServerOptions are the flow-control settings the gateway serves sessions
// with.
func ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{grpc.StaticStreamWindowSize(Window), grpc.StaticConnWindowSize(Window)}
}

// DialOptions are the flow-control settings a node dials its gateway with.
func DialOptions() []grpc.DialOption {
	return []grpc.DialOption{grpc.WithStaticStreamWindowSize(Window), grpc.WithStaticConnWindowSize(Window)}
}
