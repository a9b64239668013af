package tracing

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// A span's traceparent survives the round trip through the string a
// command stores and carries: a span started under it is its child.
func TestParentRoundTrip(t *testing.T) {
	t.Parallel()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	ctx, parent := tp.Tracer("t").Start(context.Background(), "parent")
	tparent := Parent(ctx)
	require.Regexp(t, `^00-[0-9a-f]{32}-[0-9a-f]{16}-01$`, tparent)
	require.Equal(t, parent.SpanContext().TraceID().String(), TraceID(tparent))

	_, child := tp.Tracer("t").Start(WithParent(context.Background(), tparent), "child")
	child.End()
	parent.End()
	got := rec.Ended()[0]
	require.Equal(t, "child", got.Name())
	require.Equal(t, parent.SpanContext().SpanID(), got.Parent().SpanID())
	require.True(t, got.Parent().IsRemote())

	require.Empty(t, Parent(context.Background()), "no span: no traceparent")
	require.Empty(t, TraceID(""))
	require.Empty(t, TraceID("not-a-traceparent"))
	require.False(t, trace.SpanContextFromContext(WithParent(context.Background(), "garbage")).IsValid())
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	for _, ok := range []string{"", "collector:4317", "http://127.0.0.1:4317", "https://otel.example.com:4317"} {
		require.NoError(t, Config{OTLPEndpoint: ok}.Validate(), ok)
	}
	for _, bad := range []string{"collector", "ftp://x:1", "http://"} {
		require.Error(t, Config{OTLPEndpoint: bad}.Validate(), bad)
	}
	p, err := New(context.Background(), "t", "dev", Config{})
	require.NoError(t, err)
	require.NoError(t, p.Shutdown(context.Background()), "off: a no-op provider")
}
