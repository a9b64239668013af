package gateway

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/better-compute/commands/controlplane/commands/queue"
	"github.com/better-compute/commands/internal/tracing"
)

// Span names of the gateway's part of a command's trace, children of the
// span it was queued under (commands.run).
const (
	// SpanDispatch is the move to dispatched and the send on the node's
	// session; the envelope's trace_parent names it.
	SpanDispatch = "gateway.dispatch"
	// SpanSettle is the storing of the node's terminal report.
	SpanSettle = "gateway.settle"
)

// startSpan starts name in c's trace; a root span when c has none. With
// tracing off (the no-op tracer, the default) it builds nothing: a span
// that records nothing, whose traceparent is the stored one's
// (traceParentOf).
func (s *session) startSpan(c queue.Command, name string, opts ...trace.SpanStartOption) trace.Span {
	if s.g.tracingOff {
		return trace.SpanFromContext(context.Background())
	}
	ctx := tracing.WithParent(context.Background(), c.TraceParent)
	opts = append(opts, trace.WithSpanKind(trace.SpanKindProducer), trace.WithAttributes(
		attribute.String("bc.command_id", c.ID), attribute.String("bc.node_id", c.NodeID),
		attribute.String("bc.kind", c.Kind), attribute.String("bc.lane", string(c.Lane))))
	_, span := s.g.opts.Tracer.Start(ctx, name, opts...)
	return span
}

// settleSpan records the landing, begun at start, of c's terminal report.
func (s *session) settleSpan(c queue.Command, start time.Time) {
	span := s.startSpan(c, SpanSettle, trace.WithTimestamp(start))
	span.SetAttributes(attribute.String("bc.state", string(c.State)), attribute.String("bc.reason", c.Reason))
	if c.State == queue.Failed {
		span.SetStatus(codes.Error, c.Reason)
	}
	span.End()
}

// traceParentOf is span's traceparent, or fallback when span records
// nothing (tracing off): the node then parents on the stored one.
func traceParentOf(span trace.Span, fallback string) string {
	if !span.SpanContext().IsValid() {
		return fallback
	}
	return tracing.Parent(trace.ContextWithSpan(context.Background(), span))
}

func endSpan(span trace.Span, err error) {
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

// isNoopTracer reports whether t is OpenTelemetry's no-op tracer, what
// tracing.New hands out when no OTLP endpoint is configured.
func isNoopTracer(t trace.Tracer) bool {
	switch t.(type) {
	case noop.Tracer, *noop.Tracer:
		return true
	}
	return false
}
