package session_test

import (
	"context"
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/better-compute/commands/bcd/accept"
	agentv1 "github.com/better-compute/commands/proto/bc/agent/v1"
)

// BenchmarkSessionCommand measures one command through the session: the
// gateway's Command envelope to the node's terminal CommandUpdate (decode,
// acceptance, journal, lane, plugin, update back over gRPC). The floor is
// the same kind submitted straight to the daemon in process, in the same
// run: the ratio is what the session adds.
func BenchmarkSessionCommand(b *testing.B) {
	r := newRigB(b)
	s := r.session()
	cmd, _, _ := holdCommand(r.t, "cmd_warm", "bcdcore.hold", true)
	var viaSession, floor []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		c := proto.Clone(cmd).(*agentv1.Command)
		c.Id = fmt.Sprintf("cmd_s%d", i)
		start := time.Now()
		s.send <- envelope(r.t, c)
		for done := false; !done; {
			m := <-s.recv
			if u := m.GetUpdate(); u != nil && u.GetCommandId() == c.Id && u.GetState() == agentv1.CommandState_COMMAND_STATE_SUCCEEDED {
				done = true
			}
		}
		viaSession = append(viaSession, time.Since(start))

		start = time.Now()
		ch, err := r.d.Submit(context.Background(), accept.Command{ID: fmt.Sprintf("cmd_f%d", i), NodeID: nodeID, Kind: c.Kind, Payload: c.Payload, NotAfter: c.NotAfter.AsTime()})
		require.NoError(b, err)
		for range ch {
		}
		floor = append(floor, time.Since(start))
	}
	b.StopTimer()
	p50 := func(d []time.Duration) float64 {
		sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
		return float64(d[len(d)/2])
	}
	sp, fp := p50(viaSession), p50(floor)
	b.ReportMetric(sp, "p50-ns")
	b.ReportMetric(fp, "floor-p50-ns")
	b.ReportMetric(sp/fp, "ratio")
}
