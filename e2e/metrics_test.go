package e2e

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/controlplane/server"
	"github.com/better-compute/commands/internal/testutil"
)

// scrape is one read of a /metrics endpoint, parsed.
type scrape map[string]*dto.MetricFamily

func scrapeURL(t *testing.T, client *http.Client, url string) scrape {
	t.Helper()
	resp, err := client.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	require.NoError(t, err)
	return fams
}

// value is the sample of name whose labels include want (the sum over all
// that match); ok is false when no series matches.
func (s scrape) value(name string, want map[string]string) (v float64, ok bool) {
	f := s[name]
	if f == nil {
		return 0, false
	}
next:
	for _, m := range f.GetMetric() {
		have := map[string]string{}
		for _, l := range m.GetLabel() {
			have[l.GetName()] = l.GetValue()
		}
		for k, w := range want {
			if have[k] != w {
				continue next
			}
		}
		ok = true
		switch {
		case m.Counter != nil:
			v += m.GetCounter().GetValue()
		case m.Gauge != nil:
			v += m.GetGauge().GetValue()
		case m.Histogram != nil:
			v += float64(m.GetHistogram().GetSampleCount())
		}
	}
	return v, ok
}

func (s scrape) must(t *testing.T, name string, want map[string]string) float64 {
	t.Helper()
	v, ok := s.value(name, want)
	if !ok {
		var names []string
		for n := range s {
			if strings.HasPrefix(n, "bc") {
				names = append(names, n)
			}
		}
		sort.Strings(names)
		require.Failf(t, "series missing", "%s%v is not in the scrape; it has %v", name, want, names)
	}
	return v
}

// "A test scrapes each endpoint over real HTTP and checks the series exist
// and move": bc-server's /metrics on its HTTP listener, bcd's on its unix
// socket (metricsListen), before and after commands go through, and after
// the sweeper expires one.
func TestE2E_MetricsMoveOnBothEndpoints(t *testing.T) {
	c := newCluster(t, func(cfg *server.Config) { cfg.Sweeper.Interval = server.Duration(time.Hour) })
	srvURL := c.srv.HTTPBase + "/metrics"

	// The sweeper: a pending command past its not_after expires (the node
	// has no session yet, so nothing dispatches it).
	sw := c.srv.Server.Sweeper()
	testutil.WaitFor(t, 30*time.Second, "the sweeper to lead", sw.Leading)
	before := scrapeURL(t, c.srv.HTTPClient, srvURL)
	require.Equal(t, 1.0, before.must(t, "bc_sweeper_leading", nil))
	require.Equal(t, 0.0, before.must(t, "bc_gateway_sessions", nil))
	for _, lane := range []string{"control", "provision", "bulk"} {
		before.must(t, "bc_commands_pending", map[string]string{"lane": lane})
		before.must(t, "bc_gateway_credits_in_use", map[string]string{"lane": lane})
	}
	before.must(t, "bc_outbox_lag_seconds", nil)
	stale := c.run(kindHold, newHold(t).payload())
	after := scrapeURL(t, c.srv.HTTPClient, srvURL)
	require.Equal(t, before.must(t, "bc_commands_pending", map[string]string{"lane": "control"})+1,
		after.must(t, "bc_commands_pending", map[string]string{"lane": "control"}))
	_, err := c.srv.Pool.Exec(context.Background(), `UPDATE commands SET not_after = now() - interval '1 second' WHERE id = $1`, stale.GetId())
	require.NoError(t, err)
	n, err := sw.Sweep(context.Background())
	require.NoError(t, err)
	require.Equal(t, 1, n)
	after = scrapeURL(t, c.srv.HTTPClient, srvURL)
	require.Equal(t, 1.0, after.must(t, "bc_sweeper_settled_total", map[string]string{"outcome": "expired", "lane": "control"}))
	require.Equal(t, 1.0, after.must(t, "bc_commands_settled_total", map[string]string{"kind": kindHold, "state": "expired", "reason": "not_after"}))

	// bcd with metrics on a unix socket.
	n1 := c.join()
	sockDir, err := os.MkdirTemp("", "bcdm")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(sockDir) })
	sock := filepath.Join(sockDir, "metrics.sock")
	require.NoError(t, os.WriteFile(n1.config, []byte(fmt.Sprintf("role: node\nlogLevel: debug\nmetricsListen: unix:%s\n", sock)), 0o600))
	n1.start()
	bcdClient := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", sock)
		},
	}}
	bcdURL := "http://bcd/metrics"
	var b0 scrape
	testutil.WaitFor(t, 30*time.Second, "bcd's session in its metrics", func() bool {
		b0 = scrapeURL(t, bcdClient, bcdURL)
		v, _ := b0.value("bcd_session_connected", nil)
		return v == 1
	})
	require.Equal(t, 1.0, b0.must(t, "bcd_session_established_total", nil))
	require.Equal(t, 0.0, b0.must(t, "bcd_session_reconnects_total", nil))
	require.Equal(t, 8.0, b0.must(t, "bcd_lane_workers", map[string]string{"lane": "control"}))
	require.Equal(t, 0.0, b0.must(t, "bcd_lane_busy_workers", map[string]string{"lane": "control"}))
	b0.must(t, "bcd_lane_queued", map[string]string{"lane": "bulk"})
	plugin := map[string]string{"plugin": "internal_testplugins_bcdcore_plugin"}
	require.Equal(t, 1.0, b0.must(t, "bcd_plugin_starts_total", plugin))
	require.Equal(t, 0.0, b0.must(t, "bcd_plugin_crashes_total", plugin))
	require.Equal(t, 0.0, b0.must(t, "bcd_plugin_restarts_total", plugin))
	commits0 := b0.must(t, "bcd_journal_commit_duration_seconds", nil)
	s0 := scrapeURL(t, c.srv.HTTPClient, srvURL)
	require.Equal(t, 1.0, s0.must(t, "bc_gateway_sessions", nil))

	// One command held mid-run: the lane and the credit show it.
	h := newHold(t)
	held := c.run(kindHold, h.payload())
	h.waitStarted(t)
	c.waitState(held.GetId(), "running")
	mid := scrapeURL(t, bcdClient, bcdURL)
	require.Equal(t, 1.0, mid.must(t, "bcd_lane_busy_workers", map[string]string{"lane": "control"}))
	smid := scrapeURL(t, c.srv.HTTPClient, srvURL)
	require.Equal(t, 1.0, smid.must(t, "bc_gateway_credits_in_use", map[string]string{"lane": "control"}))
	h.releaseNow(t)
	c.waitState(held.GetId(), "succeeded")

	b1 := scrapeURL(t, bcdClient, bcdURL)
	for _, st := range []string{"accepted", "running", "succeeded"} {
		require.Equal(t, 1.0, b1.must(t, "bcd_commands_total", map[string]string{"kind": kindHold, "state": st}), st)
	}
	require.Greater(t, b1.must(t, "bcd_journal_commit_duration_seconds", nil), commits0)
	require.Equal(t, 0.0, b1.must(t, "bcd_lane_busy_workers", map[string]string{"lane": "control"}))

	s1 := scrapeURL(t, c.srv.HTTPClient, srvURL)
	require.Equal(t, 1.0, s1.must(t, "bc_gateway_dispatch_latency_seconds", map[string]string{"lane": "control"}))
	require.Equal(t, 1.0, s1.must(t, "bc_commands_settled_total", map[string]string{"kind": kindHold, "state": "succeeded"}))
	require.GreaterOrEqual(t, s1.must(t, "bc_gateway_reports_stored_total", map[string]string{"state": "succeeded", "changed": "true"}), 1.0)
	require.Equal(t, 0.0, s1.must(t, "bc_gateway_credits_in_use", map[string]string{"lane": "control"}))
	require.Greater(t, s1.must(t, "bc_api_request_duration_seconds", map[string]string{"method": "/bc.api.v1.Commands/Run"}),
		s0.must(t, "bc_api_request_duration_seconds", map[string]string{"method": "/bc.api.v1.Commands/Run"}))
}
