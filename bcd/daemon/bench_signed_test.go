package daemon

import (
	"context"
	"crypto/ed25519"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/better-compute/commands/bcd/accept"
	"github.com/better-compute/commands/bcd/journal"
	"github.com/better-compute/commands/bcd/truststore"
	"github.com/better-compute/commands/internal/trust"
	agentv1 "github.com/better-compute/commands/proto/bc/agent/v1"
)

// BenchmarkWarmPathSigned is the warm path (BenchmarkWarmPath's: example.noop
// through acceptance, the synced journal, a lane worker and the plugin) on a
// node whose trust bundle holds a command-signing root, so that check 4
// verifies every command (the worker key's certificate against the root,
// the signature over the exact bytes, the audience), beside the same path
// on a node without roots, unsigned, in the same run: one command on each,
// alternately, so both see the same disk and load. Each command is decoded
// from its envelope's bytes, as the session does. It reports the signed p50
// and the unsigned floor, and their ratio (target at most 1.15).
func BenchmarkWarmPathSigned(b *testing.B) {
	_, root, err := trust.NewEd25519()
	require.NoError(b, err)
	worker, err := trust.NewWorkerKey(root, time.Now().Add(-time.Hour), 24*time.Hour)
	require.NoError(b, err)
	wire, err := trust.SignBundle(trust.Bundle{Version: 1, IssuedAt: time.Now().Add(-time.Minute),
		Roots: []trust.Root{{PublicKey: root.Public().(ed25519.PublicKey)}}}, root)
	require.NoError(b, err)
	clock := &trust.Clock{}
	signedNode := start(b, "", func(c *Config) {
		store, err := truststore.Open(b.TempDir(), nil, nil)
		require.NoError(b, err)
		require.NoError(b, store.AcceptJoin(wire, time.Now()))
		c.Trust = &truststore.Verifier{Store: store, NodeID: nodeID, Clock: clock}
		c.Clock = clock
	})
	unsignedNode := start(b, "", nil)

	envelope := func(id string, w *trust.WorkerKey) *agentv1.CommandEnvelope {
		c := &agentv1.Command{Id: id, NodeId: nodeID, Kind: "example.noop", Payload: []byte(`{}`),
			NotAfter: timestamppb.New(time.Now().Add(time.Hour)), CreatedAt: timestamppb.New(time.Now())}
		bs, err := proto.MarshalOptions{Deterministic: true}.Marshal(c)
		require.NoError(b, err)
		env := &agentv1.CommandEnvelope{Command: bs}
		if w != nil {
			env.Signature, env.WorkerCert = w.Sign(trust.PurposeCommand, bs), w.Cert
		}
		return env
	}
	ctx := context.Background()
	run := func(n *node, env *agentv1.CommandEnvelope) time.Duration {
		t0 := time.Now()
		var pc agentv1.Command
		if err := proto.Unmarshal(env.GetCommand(), &pc); err != nil {
			b.Fatal(err)
		}
		ch, err := n.d.Submit(ctx, accept.Command{ID: pc.GetId(), NodeID: pc.GetNodeId(), Kind: pc.GetKind(), Payload: pc.GetPayload(),
			NotAfter: pc.GetNotAfter().AsTime(), Envelope: env})
		if err != nil {
			b.Fatal(err)
		}
		var outcome Update
		for u := range ch {
			outcome = u
		}
		if outcome.State != journal.StateSucceeded {
			b.Fatalf("%s: %+v", pc.GetId(), outcome)
		}
		return time.Since(t0)
	}
	// The envelopes are signed before the clock runs: signing is the
	// control plane's work, verifying the node's.
	warm := 50
	signed, unsigned := make([]*agentv1.CommandEnvelope, warm+b.N), make([]*agentv1.CommandEnvelope, warm+b.N)
	for i := range signed {
		signed[i] = envelope(fmt.Sprintf("cmd_signed_%d", i), worker)
		unsigned[i] = envelope(fmt.Sprintf("cmd_unsigned_%d", i), nil)
	}
	for i := 0; i < warm; i++ {
		run(signedNode, signed[i])
		run(unsignedNode, unsigned[i])
	}
	sLat, uLat := make([]time.Duration, b.N), make([]time.Duration, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		sLat[i] = run(signedNode, signed[warm+i])
		uLat[i] = run(unsignedNode, unsigned[warm+i])
	}
	b.StopTimer()
	s50, u50 := percentile(sLat, 0.5), percentile(uLat, 0.5)
	b.ReportMetric(float64(s50.Nanoseconds()), "p50-ns")
	b.ReportMetric(float64(percentile(sLat, 0.99).Nanoseconds()), "p99-ns")
	b.ReportMetric(float64(u50.Nanoseconds()), "floor-p50-ns")
	b.ReportMetric(float64(percentile(uLat, 0.99).Nanoseconds()), "floor-p99-ns")
	b.ReportMetric(float64(s50)/float64(u50), "ratio")
	if b.N > 1 {
		b.Logf("warm path p50: signed %s, unsigned %s, ratio %.3f (target <= 1.15)", s50, u50, float64(s50)/float64(u50))
	}
}
