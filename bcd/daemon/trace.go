package daemon

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/better-compute/commands/bcd/journal"
	"github.com/better-compute/commands/internal/tracing"
)

// Span names of a command's life on the node, children of the gateway's
// dispatch span (the envelope's trace_parent).
const (
	SpanCommand   = "bcd.command"    // receipt to outcome
	SpanAccept    = "bcd.accept"     // the acceptance checks (and a wait for a spec)
	SpanLaneWait  = "bcd.lane.wait"  // handed to the lane until a worker starts it
	SpanPluginRun = "bcd.plugin.run" // the plugin's Execute
)

func (d *Daemon) tracer() trace.Tracer { return d.cfg.Tracer }

// startTrace opens e's command and accept spans under the envelope's trace
// parent; without one (a local bcd exec, an untraced command) the spans
// are roots of their own trace when a tracer is set.
func (d *Daemon) startTrace(e *entry) {
	parent := context.Background()
	if env := e.cmd.Envelope; env != nil {
		parent = tracing.WithParent(parent, env.GetTraceParent())
	}
	e.traceCtx, e.span = d.tracer().Start(parent, SpanCommand, trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(attribute.String("bc.command_id", e.cmd.ID), attribute.String("bc.kind", e.cmd.Kind)))
	_, e.acceptSpan = d.tracer().Start(e.traceCtx, SpanAccept)
}

// endAccept ends the accept span with the decision.
func (e *entry) endAccept(accepted bool, code string) {
	if e.acceptSpan == nil {
		return
	}
	e.acceptSpan.SetAttributes(attribute.Bool("bc.accepted", accepted))
	if code != "" {
		e.acceptSpan.SetAttributes(attribute.String("bc.reject_code", code))
	}
	e.acceptSpan.End()
	e.acceptSpan = nil
}

// child starts a span under e's command span.
func (d *Daemon) child(e *entry, name string) trace.Span {
	ctx := e.traceCtx
	if ctx == nil {
		ctx = context.Background()
	}
	_, s := d.tracer().Start(ctx, name)
	return s
}

// endTrace ends e's command span with its outcome (rec nil: abandoned, the
// next start settles it).
func (e *entry) endTrace(rec *journal.Record) {
	e.endAccept(false, "")
	if e.span == nil {
		return
	}
	if rec != nil {
		e.span.SetAttributes(attribute.String("bc.state", string(rec.State)), attribute.String("bc.reason", rec.Reason))
		if rec.State == journal.StateFailed {
			e.span.SetStatus(codes.Error, rec.Reason)
		}
	} else {
		e.span.SetAttributes(attribute.Bool("bc.abandoned", true))
	}
	e.span.End()
	e.span = nil
}
