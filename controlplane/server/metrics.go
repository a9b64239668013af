package server

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"google.golang.org/grpc"

	"github.com/better-compute/commands/controlplane/internal/apierr"
)

// metrics are the server's Prometheus metrics, in a registry of their own so
// that tests can run several servers in one process.
type metrics struct {
	reg      *prometheus.Registry
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
	streams  *prometheus.GaugeVec
	// ops are the command path's metrics (gateway, sweeper, queue depth).
	ops *opsMetrics
}

func newMetrics(pool *pgxpool.Pool) *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "bc_api_requests_total",
			Help: "API calls by method and result code (the ErrorInfo reason, or OK).",
		}, []string{"method", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "bc_api_request_duration_seconds",
			Help:    "Latency of unary API calls.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
		}, []string{"method"}),
		streams: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "bc_api_open_streams",
			Help: "Open server streams (event watches).",
		}, []string{"method"}),
	}
	m.reg.MustRegister(m.requests, m.duration, m.streams,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	pg := func(name, help string, f func(*pgxpool.Stat) float64) {
		m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help},
			func() float64 { return f(pool.Stat()) }))
	}
	pg("bc_db_pool_total_conns", "Connections in the database pool.", func(s *pgxpool.Stat) float64 { return float64(s.TotalConns()) })
	pg("bc_db_pool_acquired_conns", "Connections in use.", func(s *pgxpool.Stat) float64 { return float64(s.AcquiredConns()) })
	pg("bc_db_pool_max_conns", "The pool's size.", func(s *pgxpool.Stat) float64 { return float64(s.MaxConns()) })
	m.ops = newOpsMetrics(m.reg, pool)
	pg("bc_db_pool_empty_acquire_total", "Acquires that waited for a connection.", func(s *pgxpool.Stat) float64 { return float64(s.EmptyAcquireCount()) })
	return m
}

func code(err error) string {
	if err == nil {
		return "OK"
	}
	if c := apierr.CodeOf(err); c != "" {
		return string(c)
	}
	return "UNKNOWN"
}

func (m *metrics) unary() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		start := time.Now()
		resp, err := handler(ctx, req)
		m.duration.WithLabelValues(info.FullMethod).Observe(time.Since(start).Seconds())
		m.requests.WithLabelValues(info.FullMethod, code(err)).Inc()
		return resp, err
	}
}

func (m *metrics) stream() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		g := m.streams.WithLabelValues(info.FullMethod)
		g.Inc()
		defer g.Dec()
		err := handler(srv, ss)
		m.requests.WithLabelValues(info.FullMethod, code(err)).Inc()
		return err
	}
}
