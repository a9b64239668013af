package sim

import (
	"sync/atomic"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/timestamppb"

	agentv1 "github.com/better-compute/commands/proto/bc/agent/v1"
)

// Bare is the floor under a gateway session: a Session server that answers
// Hello with Welcome and then only reads, with no database, no polling and no
// dispatch. A benchmark measures the memory of an idle gateway session beside
// the memory of an idle Bare session over the same mTLS.
type Bare struct {
	agentv1.UnimplementedSessionServer
	sessions atomic.Int64
}

// Sessions is how many sessions Bare holds now.
func (b *Bare) Sessions() int { return int(b.sessions.Load()) }

// Connect holds one session: Hello, Welcome, then reads until the node goes.
func (b *Bare) Connect(stream grpc.BidiStreamingServer[agentv1.NodeMessage, agentv1.GatewayMessage]) error {
	if _, err := stream.Recv(); err != nil {
		return err
	}
	if err := stream.Send(&agentv1.GatewayMessage{Msg: &agentv1.GatewayMessage_Welcome{Welcome: &agentv1.Welcome{
		ServerTime: timestamppb.Now(), SessionEpoch: 1,
	}}}); err != nil {
		return err
	}
	b.sessions.Add(1)
	defer b.sessions.Add(-1)
	for {
		if _, err := stream.Recv(); err != nil {
			return nil
		}
	}
}
