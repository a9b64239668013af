package server_test

import (
	"bytes"
	"net/http"
	"regexp"
	"sync"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/controlplane/server"
	"github.com/better-compute/commands/controlplane/server/servertest"
)

// syncBuffer is a server's log, read while it writes.
type syncBuffer struct {
	lock sync.Mutex
	buf  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.lock.Lock()
	defer b.lock.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.lock.Lock()
	defer b.lock.Unlock()
	return b.buf.String()
}

// signingMetric reads bc_command_signing_enabled from /metrics.
func signingMetric(t *testing.T, httpAddr string) string {
	t.Helper()
	code, body := get(t, "http://"+httpAddr+"/metrics")
	require.Equal(t, http.StatusOK, code)
	m := regexp.MustCompile(`(?m)^bc_command_signing_enabled (\S+)$`).FindStringSubmatch(body)
	require.NotNil(t, m, "bc_command_signing_enabled is exposed:\n%s", body)
	return m[1]
}

// Issue 31: "a bc-server without signing logs a warning at every start and
// reports it on /readyz's detail and a metric".
func TestServer_WithoutSigningWarnsAtStartOnReadyzAndInAMetric(t *testing.T) {
	t.Parallel()
	var logs syncBuffer
	r := servertest.StartLogged(t, hclog.New(&hclog.LoggerOptions{Output: &logs, Level: hclog.Info}), nil)
	require.Regexp(t, `\[WARN\]\s+server: command signing is off: commands and node specs go unsigned: detail="command signing: off: pki.commandSigning is not set`, logs.String())

	code, body := get(t, "http://"+r.HTTP+"/readyz")
	require.Equal(t, http.StatusOK, code, "unsigned is not unready")
	require.Regexp(t, "^ready\ncommand signing: off: pki.commandSigning is not set, so the commands and node specs this process queues go unsigned", body)
	require.Equal(t, "0", signingMetric(t, r.HTTP))

	// A gateway-only replica beside it holds no key either way: it reports
	// what the api processes do, from the bundle they publish (none).
	gw := servertest.StartReplica(t, r, func(c *server.Config) {
		c.Components = []string{server.ComponentGateway}
		c.Gateway = r.Config.Gateway
		c.Gateway.Listen = "127.0.0.1:0"
	})
	_, body = get(t, "http://"+gw.HTTP+"/readyz")
	require.Contains(t, body, "command signing: off: no trust bundle is published")
	require.Equal(t, "0", signingMetric(t, gw.HTTP))
}

// With pki.commandSigning: no warning, /readyz names the root, the metric
// is 1, and a gateway-only replica says the api processes sign.
func TestServer_WithSigningReportsItOn(t *testing.T) {
	t.Parallel()
	var logs syncBuffer
	signing, _ := servertest.Signing(t)
	r := servertest.StartLogged(t, hclog.New(&hclog.LoggerOptions{Output: &logs, Level: hclog.Info}), signing)
	require.NotContains(t, logs.String(), "command signing is off")
	code, body := get(t, "http://"+r.HTTP+"/readyz")
	require.Equal(t, http.StatusOK, code)
	require.Regexp(t, `^ready\ncommand signing: on \(root [0-9a-f]{12}\)\n$`, body)
	require.Equal(t, "1", signingMetric(t, r.HTTP))

	gw := servertest.StartReplica(t, r, func(c *server.Config) {
		c.Components = []string{server.ComponentGateway}
		c.Gateway = r.Config.Gateway
		c.Gateway.Listen = "127.0.0.1:0"
	})
	_, body = get(t, "http://"+gw.HTTP+"/readyz")
	require.Regexp(t, `command signing: on \(the api processes sign; trust bundle version \d+; this gateway holds no key\)`, body)
	require.Equal(t, "1", signingMetric(t, gw.HTTP))
}
