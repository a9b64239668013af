// Package tracing is what bc-server and bcd share of OpenTelemetry: the
// OTLP exporter set up from a config's tracing.otlpEndpoint (off when
// empty), and the W3C trace context as the one string that a command
// carries from the API call that queued it (commands.trace_parent) to the
// node (CommandEnvelope.trace_parent).
package tracing

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.26.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// Config is the tracing section of bc-server's and bcd's configs.
type Config struct {
	// OTLPEndpoint is the OTLP/gRPC collector: host:port (TLS),
	// http://host:port (plaintext, a local collector) or https://host:port.
	// Empty (the default) turns tracing off.
	OTLPEndpoint string `json:"otlpEndpoint,omitempty" yaml:"otlpEndpoint"`
}

// Validate refuses an endpoint that is not host:port or an http(s) URL.
func (c Config) Validate() error {
	if c.OTLPEndpoint == "" {
		return nil
	}
	if _, _, err := endpoint(c.OTLPEndpoint); err != nil {
		return fmt.Errorf("tracing.otlpEndpoint %q: %w", c.OTLPEndpoint, err)
	}
	return nil
}

func endpoint(e string) (hostport string, insecure bool, err error) {
	if strings.Contains(e, "://") {
		u, err := url.Parse(e)
		if err != nil {
			return "", false, err
		}
		if u.Scheme != "http" && u.Scheme != "https" {
			return "", false, errors.New("the scheme must be http or https")
		}
		if u.Host == "" {
			return "", false, errors.New("no host")
		}
		return u.Host, u.Scheme == "http", nil
	}
	if !strings.Contains(e, ":") {
		return "", false, errors.New("want host:port or an http(s) URL")
	}
	return e, false, nil
}

// Provider is a tracer provider and the flush that ends it.
type Provider struct {
	trace.TracerProvider
	// Shutdown flushes the spans not yet exported and stops the exporter.
	Shutdown func(ctx context.Context) error
}

// New builds service's tracer provider from cfg: a no-op one when the
// endpoint is empty, else a batching OTLP/gRPC exporter (which dials
// lazily, so a collector that is away costs dropped spans, never a start).
func New(ctx context.Context, service, version string, cfg Config) (Provider, error) {
	if cfg.OTLPEndpoint == "" {
		return Provider{TracerProvider: noop.NewTracerProvider(), Shutdown: func(context.Context) error { return nil }}, nil
	}
	host, insecure, err := endpoint(cfg.OTLPEndpoint)
	if err != nil {
		return Provider{}, fmt.Errorf("tracing.otlpEndpoint %q: %w", cfg.OTLPEndpoint, err)
	}
	opts := []otlptracegrpc.Option{otlptracegrpc.WithEndpoint(host)}
	if insecure {
		opts = append(opts, otlptracegrpc.WithInsecure())
	}
	exp, err := otlptracegrpc.New(ctx, opts...)
	if err != nil {
		return Provider{}, fmt.Errorf("tracing: the OTLP exporter: %w", err)
	}
	res := resource.NewWithAttributes(semconv.SchemaURL, semconv.ServiceName(service), semconv.ServiceVersion(version))
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	return Provider{TracerProvider: tp, Shutdown: tp.Shutdown}, nil
}

// Parent is the traceparent of ctx's span, "" when it has none.
func Parent(ctx context.Context) string {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() {
		return ""
	}
	c := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(ctx, c)
	return c["traceparent"]
}

// WithParent returns ctx with traceparent as its remote parent span; ctx
// unchanged for "" or a malformed value.
func WithParent(ctx context.Context, traceparent string) context.Context {
	if traceparent == "" {
		return ctx
	}
	return propagation.TraceContext{}.Extract(ctx, propagation.MapCarrier{"traceparent": traceparent})
}

// TraceID is the trace id of traceparent (32 hex digits), "" when it has
// none or is malformed.
func TraceID(traceparent string) string {
	sc := trace.SpanContextFromContext(WithParent(context.Background(), traceparent))
	if !sc.IsValid() {
		return ""
	}
	return sc.TraceID().String()
}
