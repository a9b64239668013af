// Package metrics is bcd's Prometheus instrumentation: counters and
// histograms fed by the daemon's, journal's and plugin host's hooks, gauges
// read from the lanes and the session client at scrape time, and the local
// listener (loopback or a unix socket) that serves them.
package metrics

import (
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/better-compute/commands/bcd/daemon"
	"github.com/better-compute/commands/bcd/journal"
	"github.com/better-compute/commands/bcd/lanes"
	"github.com/better-compute/commands/bcd/pluginhost"
	"github.com/better-compute/commands/sdk/kind"
)

// Metrics are one bcd's metrics, in a registry of their own.
type Metrics struct {
	reg           *prometheus.Registry
	commands      *prometheus.CounterVec
	journalCommit prometheus.Histogram
	journalWrites prometheus.Histogram
	plugins       map[pluginhost.Event]*prometheus.CounterVec
}

// New registers bcd's metrics and the Go and process collectors.
func New() *Metrics {
	m := &Metrics{
		reg: prometheus.NewRegistry(),
		commands: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "bcd_commands_total",
			Help: "Command state changes bcd reported, by kind, state and reason (the failure reason or the refusal code).",
		}, []string{"kind", "state", "reason"}),
		journalCommit: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "bcd_journal_commit_duration_seconds",
			Help:    "Latency of one journal group commit (the write-ahead log's write and its fdatasync).",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 16),
		}),
		journalWrites: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "bcd_journal_commit_writes",
			Help:    "Writes carried by one journal group commit.",
			Buckets: []float64{1, 2, 4, 8, 16, 32, 64, 128, 256},
		}),
		plugins: map[pluginhost.Event]*prometheus.CounterVec{},
	}
	for e, o := range map[pluginhost.Event]prometheus.CounterOpts{
		pluginhost.EventStart:   {Name: "bcd_plugin_starts_total", Help: "Plugin processes started at bcd's start, by plugin binary."},
		pluginhost.EventCrash:   {Name: "bcd_plugin_crashes_total", Help: "Plugin processes that exited while bcd ran, by plugin binary."},
		pluginhost.EventRestart: {Name: "bcd_plugin_restarts_total", Help: "Plugin processes restarted after an exit, by plugin binary."},
	} {
		m.plugins[e] = prometheus.NewCounterVec(o, []string{"plugin"})
		m.reg.MustRegister(m.plugins[e])
	}
	m.reg.MustRegister(m.commands, m.journalCommit, m.journalWrites,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// Registry is where the metrics live (what the listener serves).
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// OnState is daemon.Config.OnState.
func (m *Metrics) OnState(u daemon.Update) {
	reason := u.Reason
	if u.State == journal.StateRejected {
		reason = string(u.RejectCode)
	}
	m.commands.WithLabelValues(u.Kind, string(u.State), label(reason)).Inc()
}

// OnCommit is journal.Options.OnCommit.
func (m *Metrics) OnCommit(d time.Duration, writes int) {
	m.journalCommit.Observe(d.Seconds())
	m.journalWrites.Observe(float64(writes))
}

// OnPluginEvent is pluginhost.Config.OnEvent.
func (m *Metrics) OnPluginEvent(plugin string, e pluginhost.Event) {
	if e == pluginhost.EventStart {
		// A plugin's crash and restart series exist from its start, at 0,
		// so that rate() and increase() see the first crash.
		for _, c := range m.plugins {
			c.WithLabelValues(plugin)
		}
	}
	if c, ok := m.plugins[e]; ok {
		c.WithLabelValues(plugin).Inc()
	}
}

// Lanes registers the lane gauges over pool, read at scrape time.
func (m *Metrics) Lanes(pool *lanes.Pool) {
	for _, l := range kind.Lanes {
		l := l
		labels := prometheus.Labels{"lane": string(l)}
		m.reg.MustRegister(
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "bcd_lane_workers", Help: "Workers of the lane.", ConstLabels: labels},
				func() float64 { return float64(pool.Sizes().Of(l)) }),
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "bcd_lane_busy_workers", Help: "Workers of the lane with a command (occupancy).", ConstLabels: labels},
				func() float64 { return float64(pool.InUse(l)) }),
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "bcd_lane_queued", Help: "Commands handed to the lane and not yet picked up by a worker.", ConstLabels: labels},
				func() float64 { return float64(pool.Queued(l)) }),
		)
	}
}

// Session is what the session metrics read: *session.Client, or nil for
// a bcd without a control plane.
type Session interface {
	Connected() bool
	Sessions() int
	Unacked() int
}

// Session registers the session gauges and counters over s, read at
// scrape time; s returns nil while there is no session client.
func (m *Metrics) Session(s func() Session) {
	read := func(f func(Session) float64) func() float64 {
		return func() float64 {
			if c := s(); c != nil {
				return f(c)
			}
			return 0
		}
	}
	m.reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "bcd_session_connected", Help: "1 while a session with the control plane is open (got its Welcome), else 0."},
			read(func(c Session) float64 { return b2f(c.Connected()) })),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "bcd_session_established_total", Help: "Sessions that got a Welcome since bcd started."},
			read(func(c Session) float64 { return float64(c.Sessions()) })),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "bcd_session_reconnects_total", Help: "Sessions established after the first: each follows a lost one."},
			read(func(c Session) float64 { return float64(max(c.Sessions()-1, 0)) })),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "bcd_session_unacked_updates", Help: "Command updates sent and not yet acknowledged by the gateway."},
			read(func(c Session) float64 { return float64(c.Unacked()) })),
	)
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// label keeps a reason usable as a label value: a short token
// (plugin-crashed, BUSY), or "other" for free text.
func label(reason string) string {
	if len(reason) > 40 || strings.ContainsAny(reason, " \t\n") {
		return "other"
	}
	return reason
}
