package server

import (
	"context"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/better-compute/commands/controlplane/commands/queue"
	"github.com/better-compute/commands/controlplane/commands/sweeper"
	"github.com/better-compute/commands/controlplane/front/gateway"
	"github.com/better-compute/commands/sdk/kind"
)

// opsMetrics are the command path's metrics: the gateway's (an Observer),
// the sweeper's, and the queue's depth and the outbox's lag, which are read
// from the database at scrape time only.
type opsMetrics struct {
	credits       *prometheus.GaugeVec
	dispatchDelay *prometheus.HistogramVec
	reports       *prometheus.CounterVec
	settled       *prometheus.CounterVec
	swept         *prometheus.CounterVec
}

func newOpsMetrics(reg *prometheus.Registry, pool *pgxpool.Pool) *opsMetrics {
	o := &opsMetrics{
		credits: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "bc_gateway_credits_in_use",
			Help: "Lane credits held by commands sent to nodes and not yet settled, summed over this replica's sessions.",
		}, []string{"lane"}),
		dispatchDelay: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "bc_gateway_dispatch_latency_seconds",
			Help: "From a command's created_at (the enqueue transaction; or its later not_before or next_attempt_at) to the gateway's send of it on the node's session.",
			// From a millisecond (a NOTIFY wake-up) to minutes (a node
			// away, or a lane without credit).
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 18),
		}, []string{"lane"}),
		reports: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "bc_gateway_reports_stored_total",
			Help: "Node reports stored, by the command's state after them and whether they moved it.",
		}, []string{"state", "changed"}),
		settled: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "bc_commands_settled_total",
			Help: "Commands this replica settled (a node's report or the sweeper), by kind, terminal state and reason.",
		}, []string{"kind", "state", "reason"}),
		swept: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "bc_sweeper_settled_total",
			Help: "Commands the sweeper settled: expired (pending past not_after) or timeout (in flight past not_after plus the kind's timeout), by lane.",
		}, []string{"outcome", "lane"}),
	}
	for _, l := range kind.Lanes {
		o.credits.WithLabelValues(string(l))
	}
	reg.MustRegister(o.credits, o.dispatchDelay, o.reports, o.settled, o.swept, &dbCollector{pool: pool})
	return o
}

// Credits implements gateway.Observer.
func (o *opsMetrics) Credits(lane kind.Lane, delta int) {
	o.credits.WithLabelValues(string(lane)).Add(float64(delta))
}

// Dispatched implements gateway.Observer.
func (o *opsMetrics) Dispatched(c queue.Command, since time.Duration) {
	o.dispatchDelay.WithLabelValues(string(c.Lane)).Observe(max(since, 0).Seconds())
}

// Reported implements gateway.Observer.
func (o *opsMetrics) Reported(c queue.Command, changed bool) {
	o.reports.WithLabelValues(string(c.State), boolLabel(changed)).Inc()
	if changed && c.State.Terminal() {
		o.settled.WithLabelValues(c.Kind, string(c.State), reasonLabel(c.Reason)).Inc()
	}
}

// onSwept is sweeper.Options.OnSwept.
func (o *opsMetrics) onSwept(expired, timedOut []queue.Command) {
	for _, c := range expired {
		o.swept.WithLabelValues("expired", string(c.Lane)).Inc()
		o.settled.WithLabelValues(c.Kind, string(c.State), reasonLabel(c.Reason)).Inc()
	}
	for _, c := range timedOut {
		o.swept.WithLabelValues("timeout", string(c.Lane)).Inc()
		o.settled.WithLabelValues(c.Kind, string(c.State), reasonLabel(c.Reason)).Inc()
	}
}

// registerGateway adds the session count of g and the sessions it shed.
func registerGateway(reg *prometheus.Registry, g *gateway.Gateway) {
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "bc_gateway_sessions", Help: "Node sessions this replica holds.",
	}, func() float64 { return float64(g.Sessions()) }))
	reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "bc_gateway_sessions_shed_total", Help: "Node sessions this replica ended because it held more than its share of the gateways' sessions (gateway.shed); their nodes reconnect through the load balancer.",
	}, func() float64 { return float64(g.Shed()) }))
}

// registerSweeper adds whether sw leads.
func registerSweeper(reg *prometheus.Registry, sw *sweeper.Sweeper) {
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "bc_sweeper_leading", Help: "1 while this replica's sweeper holds the command-sweeper lease (exactly one replica should).",
	}, func() float64 { return boolFloat(sw.Leading()) }))
}

var (
	pendingDesc = prometheus.NewDesc("bc_commands_pending", "Pending commands by lane (read at scrape time over the open-commands index).", []string{"lane"}, nil)
	lagDesc     = prometheus.NewDesc("bc_outbox_lag_seconds", "Age of the oldest outbox event that watchers cannot read yet (written at or above the horizon, which an older open transaction holds back); 0 when none.", nil, nil)
)

// dbCollector reads the gauges that need a query, at scrape time: a
// handful of rows, never per command.
// A failed query omits its gauges from that scrape (and the alert rules
// treat an absent series as unknown, not zero).
type dbCollector struct {
	pool *pgxpool.Pool
}

// Describe implements prometheus.Collector.
func (d *dbCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- pendingDesc
	ch <- lagDesc
}

// Collect implements prometheus.Collector.
func (d *dbCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	counts := map[string]float64{}
	for _, l := range kind.Lanes {
		counts[string(l)] = 0
	}
	pending, err := queue.PendingByLane(ctx, d.pool)
	if err == nil {
		for lane, n := range pending {
			counts[lane] = float64(n)
		}
		for lane, n := range counts {
			ch <- prometheus.MustNewConstMetric(pendingDesc, prometheus.GaugeValue, n, lane)
		}
	}
	var lag float64
	if err := d.pool.QueryRow(ctx, `SELECT coalesce(extract(epoch FROM now() - min(created_at)), 0)::float8
		FROM outbox WHERE txid >= bc_outbox_horizon()`).Scan(&lag); err == nil {
		ch <- prometheus.MustNewConstMetric(lagDesc, prometheus.GaugeValue, max(lag, 0))
	}
}

func boolLabel(b bool) string {
	if b {
		return "true"
	}
	return "false"
}

func boolFloat(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// reasonLabel keeps a reason usable as a label value: a short code
// (timeout, not_after, plugin-crashed), or "other" for free text.
func reasonLabel(r string) string {
	if len(r) > 40 || strings.ContainsAny(r, " \t\n") {
		return "other"
	}
	return r
}
