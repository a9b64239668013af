package e2e

import (
	"context"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	collectorv1 "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc"

	"github.com/better-compute/commands/bcd/daemon"
	"github.com/better-compute/commands/controlplane/front/api"
	"github.com/better-compute/commands/controlplane/front/gateway"
	"github.com/better-compute/commands/controlplane/server"
	"github.com/better-compute/commands/internal/testutil"
)

// collector is an OTLP/gRPC trace collector in the test process: bcd, a
// real subprocess, exports its spans to it as it would to a real one.
type collector struct {
	collectorv1.UnimplementedTraceServiceServer
	// lock guards spans.
	lock  sync.Mutex
	spans []span
}

// span is what the test compares of a span, from either side.
type span struct {
	name                    string
	traceID, spanID, parent string
}

func (c *collector) Export(_ context.Context, req *collectorv1.ExportTraceServiceRequest) (*collectorv1.ExportTraceServiceResponse, error) {
	c.lock.Lock()
	defer c.lock.Unlock()
	for _, rs := range req.GetResourceSpans() {
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				c.spans = append(c.spans, span{name: s.GetName(), traceID: hex.EncodeToString(s.GetTraceId()),
					spanID: hex.EncodeToString(s.GetSpanId()), parent: hex.EncodeToString(s.GetParentSpanId())})
			}
		}
	}
	return &collectorv1.ExportTraceServiceResponse{}, nil
}

func (c *collector) all() []span {
	c.lock.Lock()
	defer c.lock.Unlock()
	return append([]span(nil), c.spans...)
}

func startCollector(t *testing.T) (*collector, string) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	c := &collector{}
	g := grpc.NewServer()
	collectorv1.RegisterTraceServiceServer(g, c)
	go func() { _ = g.Serve(l) }()
	t.Cleanup(g.Stop)
	return c, l.Addr().String()
}

// byName finds the one span called name in trace.
func byName(t *testing.T, spans []span, trace, name string) span {
	t.Helper()
	var found []span
	for _, s := range spans {
		if s.traceID == trace && s.name == name {
			found = append(found, s)
		}
	}
	require.Len(t, found, 1, "one %s span in trace %s among %v", name, trace, spans)
	return found[0]
}

// "spans cover enqueue, dispatch, acceptance, the lane wait, the plugin's
// run and the settle": one command's spans, the control plane's recorded
// in memory (tracetest) and bcd's exported over OTLP by the real bcd, form
// one trace from commands.run to the plugin's run, each parent link
// pointing at the span before it; commands.get shows the trace id.
func TestE2E_OneCommandOneTraceFromTheAPIToThePlugin(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	c := newCluster(t, func(cfg *server.Config) { cfg.TracerProvider = tp })
	col, addr := startCollector(t)

	n := c.join()
	require.NoError(t, os.WriteFile(n.config, []byte(fmt.Sprintf("role: node\nlogLevel: debug\ntracing:\n  otlpEndpoint: http://%s\n", addr)), 0o600))
	n.start()
	h := newHold(t)
	h.releaseNow(t)
	cmd := c.run(kindHold, h.payload())
	require.Len(t, cmd.GetTraceId(), 32, "commands.run returns the trace id")
	got := c.waitState(cmd.GetId(), "succeeded")
	require.Equal(t, cmd.GetTraceId(), got.GetTraceId(), "commands.get shows it")
	// SIGTERM flushes bcd's exporter before it exits.
	n.stop()

	trace := cmd.GetTraceId()
	// The gateway ends gateway.settle just after the settle commits, so
	// commands.get may show succeeded before the span has ended: wait for
	// the span, not for the state.
	var spans []span
	testutil.WaitFor(t, 10*time.Second, "the gateway.settle span to end", func() bool {
		spans = spans[:0]
		for _, s := range rec.Ended() {
			spans = append(spans, span{name: s.Name(), traceID: s.SpanContext().TraceID().String(),
				spanID: s.SpanContext().SpanID().String(), parent: s.Parent().SpanID().String()})
		}
		for _, s := range spans {
			if s.traceID == trace && s.name == gateway.SpanSettle {
				return true
			}
		}
		return false
	})
	spans = append(spans, col.all()...)

	run := byName(t, spans, trace, api.SpanRun)
	require.Equal(t, byName(t, spans, trace, api.SpanEnqueue).parent, run.spanID)
	dispatch := byName(t, spans, trace, gateway.SpanDispatch)
	require.Equal(t, run.spanID, dispatch.parent)
	require.Equal(t, run.spanID, byName(t, spans, trace, gateway.SpanSettle).parent)
	onNode := byName(t, spans, trace, daemon.SpanCommand)
	require.Equal(t, dispatch.spanID, onNode.parent, "bcd's span is a child of the gateway's dispatch (the envelope's trace_parent)")
	for _, name := range []string{daemon.SpanAccept, daemon.SpanLaneWait, daemon.SpanPluginRun} {
		require.Equal(t, onNode.spanID, byName(t, spans, trace, name).parent, name)
	}
}
