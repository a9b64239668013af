package api

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/metadata"

	"github.com/better-compute/commands/internal/tracing"
	apiv1 "github.com/better-compute/commands/proto/bc/api/v1"
)

// Span names of the API's part of a command's trace.
const (
	// SpanRun is the commands.run call: the command's trace starts here,
	// or continues a caller's traceparent sent as gRPC metadata.
	SpanRun = "commands.run"
	// SpanEnqueue is the enqueue transaction under it.
	SpanEnqueue = "enqueue"
)

// startRunSpan starts commands.run's span, under the caller's W3C
// traceparent when its metadata carries one.
func (s *Server) startRunSpan(ctx context.Context, req *apiv1.RunCommandRequest) (context.Context, trace.Span) {
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		if tp := md.Get("traceparent"); len(tp) == 1 {
			ctx = tracing.WithParent(ctx, tp[0])
		}
	}
	return s.tracer.Start(ctx, SpanRun, trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(
		attribute.String("bc.tenant_id", req.GetTenantId()), attribute.String("bc.node_id", req.GetNodeId()),
		attribute.String("bc.kind", req.GetKind())))
}

// endSpan ends span, marking it failed with err.
func endSpan(span trace.Span, err error) {
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}
