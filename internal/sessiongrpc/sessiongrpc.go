// Package sessiongrpc holds the gRPC transport settings that both ends of a
// node session use: the gateway (bc-server) serves with ServerOptions and
// bcd (and the fleet simulator) dials with DialOptions.
//
// Why it exists: a session is one long-lived HTTP/2 connection carrying one
// stream, quiet most of the time, with small messages (a command, its
// acked, running and result reports, their acknowledgements). With gRPC's
// default dynamic flow control, every quiet-to-busy turn of such a
// connection makes the receiver send a bandwidth-estimation PING and the
// sender answer it: more writes and reads, each a system call and a TLS
// record, per command and per side, that carry no command. Over a fan-out
// to 10,000 nodes, fixed windows took the gateway's CPU from about 4.3 s to
// 3.3 s and the simulator's from 2.3 s to 1.6 s (BenchmarkSessions, runs
// alternated). The estimate buys little here: it grows the window for bulk
// transfers, and a session's messages are small; a rare large one (a
// result, up to gRPC's 4 MiB limit) still flows under a fixed window, the
// receiver granting its size as it reads it, at the cost of a round trip.
package sessiongrpc

import "google.golang.org/grpc"

// Window is the fixed HTTP/2 flow-control window of a session's stream and
// of its connection: how much the sender may have in flight that the
// receiver has not read. It is four times gRPC's initial 64 KiB and a
// hundred times a usual command or report, so those never wait on a window
// update. It also bounds what a session whose reader stalls (its gateway
// waiting on the database) can leave buffered: 256 KiB a session, about
// 2.5 GiB if every one of 10,000 nodes sent that much at once, where the
// dynamic windows could grow to 16 MiB each on a busy link.
const Window = 256 << 10

// ServerOptions are the flow-control settings the gateway serves sessions
// with.
func ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{grpc.StaticStreamWindowSize(Window), grpc.StaticConnWindowSize(Window)}
}

// DialOptions are the flow-control settings a node dials its gateway with.
func DialOptions() []grpc.DialOption {
	return []grpc.DialOption{grpc.WithStaticStreamWindowSize(Window), grpc.WithStaticConnWindowSize(Window)}
}
