// Package e2e holds the end-to-end tests: the real control plane server
// (servertest: the server package with its gateway, join endpoint and
// sweeper) on a real PostgreSQL, the real bcd binary joined to it with
// `bcd join` and run with `bcd run`, and real plugin subprocesses (the
// bcdcore test plugin's e2e kinds count their runs in a file). Commands go in
// through the API or the CLI, exactly as an operator's would. signed_test.go
// runs the first-party plugins instead, with command signing on
// (newSignedCluster). Run them under scripts/with-postgres.
package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/better-compute/commands/bcd/pluginhost"
	"github.com/better-compute/commands/controlplane/commands/kinds"
	"github.com/better-compute/commands/controlplane/front/api"
	"github.com/better-compute/commands/controlplane/front/cli"
	"github.com/better-compute/commands/controlplane/server"
	"github.com/better-compute/commands/controlplane/server/servertest"
	"github.com/better-compute/commands/internal/testutil"
	apiv1 "github.com/better-compute/commands/proto/bc/api/v1"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testutil.CleanupBuilds()
	os.Exit(code)
}

// The e2e kinds of internal/testplugins/bcdcore_plugin.
const (
	kindHold     = "e2e.hold"     // retry-safe: counts its runs, holds until released
	kindHoldOnce = "e2e.holdonce" // not retry-safe
	kindReboot   = "e2e.reboot"   // self-terminating: a new boot completes it
	// kindHangShort is not retry-safe, times out after 3s, and ignores its
	// deadline and cancel until released.
	kindHangShort = "e2e.hangshort"
)

// cluster is a control plane and what its nodes need.
type cluster struct {
	t       *testing.T
	srv     *servertest.Running
	cfg     server.Config
	bcd     string
	plugins string
	conn    *grpc.ClientConn
	api     apiv1.CommandsClient
	// stopRestarted stops the server restartControlPlane started last.
	stopRestarted func()
}

// newCluster starts a control plane; adjust, when given, changes its config
// after the harness's own settings.
func newCluster(t *testing.T, adjust ...func(*server.Config)) *cluster {
	t.Helper()
	return newClusterOn(t, "", adjust...)
}

// newClusterOn is newCluster on the database at dsn (a fresh one of
// pgtest's when empty).
func newClusterOn(t *testing.T, dsn string, adjust ...func(*server.Config)) *cluster {
	t.Helper()
	c := &cluster{t: t, bcd: testutil.BuildBinary(t, "./bcd/cmd/bcd"), plugins: t.TempDir()}
	src := testutil.BuildBinary(t, "./internal/testplugins/bcdcore_plugin")
	b, err := os.ReadFile(src)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(c.plugins, filepath.Base(src)), b, 0o755))
	kindsDir := c.writeKinds()
	// bc-server's log, shown when the test fails.
	serverLog := &lockedBuffer{}
	t.Cleanup(func() {
		if t.Failed() {
			out := serverLog.String()
			if len(out) > 64<<10 {
				out = "…" + out[len(out)-64<<10:]
			}
			t.Logf("bc-server log:\n%s", out)
		}
	})
	logger := hclog.New(&hclog.LoggerOptions{Name: "bc-server", Level: hclog.Info, Output: serverLog})
	c.srv = servertest.StartDSN(t, dsn, logger, func(cfg *server.Config) {
		cfg.KindsDir = kindsDir
		cfg.Allowlist = append(append([]string{}, api.DefaultAllowlist...), kindHold, kindHoldOnce, kindReboot, kindHangShort)
		for _, a := range adjust {
			a(cfg)
		}
		c.cfg = *cfg
	})
	c.cfg.GRPCListen, c.cfg.Gateway.Listen, c.cfg.HTTPListen = c.srv.GRPC, c.srv.Gateway, "127.0.0.1:0"
	conn, err := grpc.NewClient(c.srv.GRPC, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	c.conn, c.api = conn, apiv1.NewCommandsClient(conn)
	return c
}

// writeKinds registers the e2e kinds with the control plane exactly as the
// plugin serves them (the gateway dispatches a kind only to a node whose
// manifest digest matches).
func (c *cluster) writeKinds() string {
	host := pluginhost.New(hclog.NewNullLogger(), pluginhost.Config{Dir: c.plugins}, nil)
	require.NoError(c.t, host.Start(context.Background()))
	defer func() { require.NoError(c.t, host.Close()) }()
	var ms []any
	for _, m := range host.Manifests() {
		if strings.HasPrefix(m.Kind, "e2e.") {
			ms = append(ms, m)
		}
	}
	require.Len(c.t, ms, 4)
	b, err := json.Marshal(ms)
	require.NoError(c.t, err)
	parsed, err := kinds.ParseManifests(b)
	require.NoError(c.t, err)
	for i, m := range host.Manifests() {
		_ = i
		for _, p := range parsed {
			if p.Kind == m.Kind {
				require.Equal(c.t, m.Digest(), p.Digest(), "the registered manifest of %s keeps the plugin's digest", m.Kind)
			}
		}
	}
	dir := c.t.TempDir()
	require.NoError(c.t, os.WriteFile(filepath.Join(dir, "e2e.json"), b, 0o600))
	return dir
}

// restartControlPlane stops the server and starts another on the same
// database, node CA and addresses, as a restart of the process would.
func (c *cluster) restartControlPlane() {
	c.t.Helper()
	require.NoError(c.t, c.srv.Stop())
	if c.stopRestarted != nil {
		c.stopRestarted() // a second restart stops the first one's server
	}
	reg, err := kinds.NewRegistry(servertest.Manifests()...)
	require.NoError(c.t, err)
	srv, err := server.New(context.Background(), c.cfg, reg, hclog.NewNullLogger())
	require.NoError(c.t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	var once sync.Once
	c.stopRestarted = func() {
		once.Do(func() {
			cancel()
			<-done
		})
	}
	c.t.Cleanup(c.stopRestarted)
}

func (c *cluster) ctx() context.Context {
	return metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+servertest.TokOps)
}

// run queues a command through commands.run.
func (c *cluster) run(k string, payload map[string]any) *apiv1.Command {
	c.t.Helper()
	p, err := structpb.NewStruct(payload)
	require.NoError(c.t, err)
	cmd, err := c.api.Run(c.ctx(), &apiv1.RunCommandRequest{TenantId: servertest.TenantA, NodeId: servertest.NodeA1, Kind: k, Payload: p})
	require.NoError(c.t, err)
	return cmd
}

func (c *cluster) get(id string) *apiv1.Command {
	c.t.Helper()
	var cmd *apiv1.Command
	// The API may be restarting: retry until the deadline.
	testutil.WaitFor(c.t, 30*time.Second, "commands.get "+id, func() bool {
		got, err := c.api.Get(c.ctx(), &apiv1.GetCommandRequest{TenantId: servertest.TenantA, NodeId: servertest.NodeA1, CommandId: id})
		if err != nil {
			return false
		}
		cmd = got
		return true
	})
	return cmd
}

func (c *cluster) waitState(id, state string) *apiv1.Command {
	c.t.Helper()
	var cmd *apiv1.Command
	testutil.WaitFor(c.t, 60*time.Second, "command "+id+" to be "+state, func() bool {
		got, err := c.api.Get(c.ctx(), &apiv1.GetCommandRequest{TenantId: servertest.TenantA, NodeId: servertest.NodeA1, CommandId: id})
		if err != nil {
			return false
		}
		cmd = got
		return got.GetState() == state
	})
	return cmd
}

// settledCount is how many command.settled events the command published:
// exactly one for every command that reached a terminal state.
func (c *cluster) settledCount(id string) int {
	c.t.Helper()
	var n int
	require.NoError(c.t, c.srv.Pool.QueryRow(context.Background(),
		`SELECT count(*) FROM outbox WHERE topic = 'command.settled' AND payload->>'commandId' = $1`, id).Scan(&n))
	return n
}

// cli runs the better-compute CLI in process against the server.
func (c *cluster) cli(args ...string) (stdout, stderr string, code int) {
	var out, errb bytes.Buffer
	conf := filepath.Join(c.t.TempDir(), "bc.yaml")
	require.NoError(c.t, os.WriteFile(conf, nil, 0o600))
	env := cli.Env{Args: args, Stdout: &out, Stderr: &errb, Getenv: func(k string) string {
		switch k {
		case "BC_ENDPOINT":
			return "http://" + c.srv.GRPC
		case "BC_TOKEN":
			return servertest.TokOps
		case "BC_TENANT":
			return servertest.TenantA
		case "BC_CONFIG":
			return conf
		}
		return ""
	}}
	code = cli.Main(context.Background(), env)
	return out.String(), errb.String(), code
}

// node is one bcd: its state directory, boot id file and process.
type node struct {
	c      *cluster
	state  string
	boot   string
	config string
	logs   *lockedBuffer
	proc   *exec.Cmd
	done   chan struct{}
	// controlPlane, when set, is the gateway `bcd run` connects to instead
	// of the one it joined through.
	controlPlane string
	// joinOut is what `bcd join` printed.
	joinOut string
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// join makes a node directory and runs `bcd join` with a fresh token.
func (c *cluster) join() *node {
	c.t.Helper()
	return c.joinAs(servertest.NodeA1)
}

// joinAs is join for node id (a node the database holds).
func (c *cluster) joinAs(id string) *node {
	c.t.Helper()
	n := &node{c: c, state: c.t.TempDir(), boot: filepath.Join(c.t.TempDir(), "boot_id"), config: filepath.Join(c.t.TempDir(), "bcd.yaml"), logs: &lockedBuffer{}}
	require.NoError(c.t, os.WriteFile(n.boot, []byte("boot-1\n"), 0o600))
	require.NoError(c.t, os.WriteFile(n.config, []byte("role: node\nlogLevel: debug\n"), 0o600))
	out, errs, code := n.bcd("join", "--token", c.srv.JoinToken(c.t, id), "--server", c.srv.Gateway,
		"--ca-file", filepath.Join(c.srv.CADir, "ca.pem"))
	require.Equal(c.t, 0, code, "bcd join: %s", errs)
	require.Contains(c.t, out, "joined as "+id)
	n.joinOut = out
	c.t.Cleanup(func() {
		n.kill()
		if c.t.Failed() {
			c.t.Logf("bcd logs:\n%s", n.logs.String())
		}
	})
	return n
}

func (n *node) args(args ...string) []string {
	out := append(append([]string{}, args...), "--config", n.config, "--plugins", n.c.plugins, "--state-dir", n.state, "--boot-id-file", n.boot)
	if n.controlPlane != "" && len(args) > 0 && args[0] == "run" {
		out = append(out, "--control-plane", n.controlPlane)
	}
	return out
}

func (n *node) bcd(args ...string) (string, string, int) {
	n.c.t.Helper()
	cmd := exec.Command(n.c.bcd, n.args(args...)...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else {
		require.NoError(n.c.t, err)
	}
	return out.String(), errb.String(), code
}

// start runs `bcd run` and waits until the gateway holds its session.
func (n *node) start() {
	n.c.t.Helper()
	before := n.sessions()
	n.launch()
	n.waitSession(before)
}

// launch runs `bcd run` without waiting for a session.
func (n *node) launch() {
	n.c.t.Helper()
	n.proc = exec.Command(n.c.bcd, n.args("run")...)
	n.proc.Stdout, n.proc.Stderr = n.logs, n.logs
	require.NoError(n.c.t, n.proc.Start())
	n.done = make(chan struct{})
	go func(p *exec.Cmd, done chan struct{}) {
		_ = p.Wait()
		close(done)
	}(n.proc, n.done)
}

// sessions counts the sessions bcd opened so far (its Welcome log lines).
func (n *node) sessions() int { return strings.Count(n.logs.String(), "session open") }

// waitSession waits for a session after the first before.
func (n *node) waitSession(before int) {
	n.c.t.Helper()
	testutil.WaitFor(n.c.t, 60*time.Second, "bcd's session", func() bool { return n.sessions() > before })
}

// kill ends bcd with SIGKILL: no goodbye, no journal flush beyond its syncs.
func (n *node) kill() {
	if n.proc == nil {
		return
	}
	_ = n.proc.Process.Signal(syscall.SIGKILL)
	<-n.done
	n.proc = nil
}

// stop ends bcd with SIGTERM and waits for it.
func (n *node) stop() {
	n.c.t.Helper()
	require.NoError(n.c.t, n.proc.Process.Signal(syscall.SIGTERM))
	select {
	case <-n.done:
	case <-time.After(30 * time.Second):
		n.c.t.Fatal("bcd did not stop on SIGTERM")
	}
	n.proc = nil
}

// hold is a payload for the hold kinds, with its files in a temp dir.
type hold struct {
	count, started, release string
}

func newHold(t *testing.T) hold {
	d := t.TempDir()
	return hold{count: filepath.Join(d, "count"), started: filepath.Join(d, "started"), release: filepath.Join(d, "release")}
}

func (h hold) payload() map[string]any {
	return map[string]any{"countFile": h.count, "startedFile": h.started, "releaseFile": h.release}
}

func (h hold) runs(t *testing.T) int {
	b, err := os.ReadFile(h.count)
	if os.IsNotExist(err) {
		return 0
	}
	require.NoError(t, err)
	return strings.Count(string(b), "\n")
}

func (h hold) waitStarted(t *testing.T) {
	testutil.WaitFor(t, 30*time.Second, "the run to start", func() bool {
		_, err := os.Stat(h.started)
		return err == nil
	})
}

func (h hold) releaseNow(t *testing.T) {
	require.NoError(t, os.WriteFile(h.release, nil, 0o600))
}
