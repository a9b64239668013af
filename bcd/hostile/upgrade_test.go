package hostile

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"
	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/bcd/handoff"
	"github.com/better-compute/commands/bcd/truststore"
	"github.com/better-compute/commands/internal/fakesystemd"
	"github.com/better-compute/commands/internal/testhook"
	"github.com/better-compute/commands/internal/testutil"
	"github.com/better-compute/commands/internal/trust"
	"github.com/better-compute/commands/internal/upgrade"
	agentv1 "github.com/better-compute/commands/proto/bc/agent/v1"
)

// The builds of the upgrade tests: the real bcd binary with another
// version each (internal/version), and the test hooks of internal/testhook
// compiled into C (its self-check fails) and D (it never rejoins).
const (
	verA = "1.0.0"
	verB = "1.1.0"
	verC = "1.2.0"
	verD = "1.3.0"
)

const upgradeNode = "node_upgrade"

// upgradeBuilds are the binaries, built once per test process.
type upgradeBuilds struct {
	bcd    map[string]string
	plugin string
	helper string
}

func buildUpgrade(t *testing.T) upgradeBuilds {
	t.Helper()
	faults := map[string]string{verA: testhook.HoldFault, verB: testhook.HoldFault,
		verC: testhook.FailSelfCheck + "," + testhook.HoldFault, verD: testhook.NeverRejoin + "," + testhook.HoldFault}
	b := upgradeBuilds{bcd: map[string]string{}}
	for v, f := range faults {
		ld := "-X github.com/better-compute/commands/internal/version.Version=" + v +
			" -X github.com/better-compute/commands/internal/testhook.Fault=" + f
		b.bcd[v] = testutil.BuildLDFlags(t, "./bcd/cmd/bcd", v, ld)
	}
	hook := "-X github.com/better-compute/commands/internal/testhook.Fault=" + testhook.HoldFault
	b.plugin = testutil.BuildLDFlags(t, "./plugins/upgrade/cmd/bc-kind-upgrade", "hold", hook)
	b.helper = testutil.BuildLDFlags(t, "./bcd/cmd/bcd-upgrader", "hold", hook)
	return b
}

// upgradeNodeEnv is one node on a versioned install directory, run as
// bcd.service by a fake systemd on a private bus, joined to a scripted
// gateway whose trust bundle holds a release key.
type upgradeNodeEnv struct {
	t       *testing.T
	builds  upgradeBuilds
	layout  upgrade.Layout
	state   string
	config  string
	holdDir string
	mgr     *fakesystemd.Manager
	gw      *gateway
	worker  *trust.WorkerKey
	release ed25519.PrivateKey
	srv     *httptest.Server
	log     *syncBuffer
	// packages maps a version to its package file, served by srv; pkgLock
	// guards it.
	pkgLock  sync.Mutex
	packages map[string]string
}

func newUpgradeNode(t *testing.T, builds upgradeBuilds, hold string) *upgradeNodeEnv {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	bus, err := fakesystemd.StartBus(ctx, t.TempDir())
	if errors.Is(err, fakesystemd.ErrNoDaemon) {
		t.Skip("dbus-daemon is not installed")
	}
	require.NoError(t, err)
	t.Cleanup(bus.Close)

	e := &upgradeNodeEnv{t: t, builds: builds, layout: upgrade.Layout{Root: t.TempDir()}, state: t.TempDir(), holdDir: t.TempDir(),
		log: &syncBuffer{}, packages: map[string]string{}}
	// The authority: a command-signing root, its worker key, a release key.
	root := edKey(t)
	e.release = edKey(t)
	e.worker, err = trust.NewWorkerKey(root, time.Now().Add(-time.Hour), 24*time.Hour)
	require.NoError(t, err)
	bundle, err := trust.SignBundle(trust.Bundle{Version: 1, IssuedAt: time.Now().Add(-time.Minute).UTC().Truncate(time.Second),
		Roots:       []trust.Root{{PublicKey: root.Public().(ed25519.PublicKey)}},
		ReleaseKeys: []trust.Root{{PublicKey: e.release.Public().(ed25519.PublicKey)}}}, root)
	require.NoError(t, err)

	ca := newNodeCA(t)
	e.gw = newGateway(t, ca.gatewayTLS(t))
	e.gw.setWelcome(func() *agentv1.Welcome {
		return &agentv1.Welcome{ServerTime: ts(time.Now()), SessionEpoch: 1, TrustBundle: &agentv1.TrustBundle{Version: 1, Signed: bundle}}
	})
	tlsDir := filepath.Join(e.state, "tls")
	require.NoError(t, os.MkdirAll(tlsDir, 0o700))
	certPEM, keyPEM := ca.node(t, trust.Identity{NodeID: upgradeNode, Role: "node"})
	info, err := json.Marshal(map[string]string{"nodeId": upgradeNode, "server": e.gw.addr})
	require.NoError(t, err)
	for name, data := range map[string][]byte{"node.key": keyPEM, "node.crt": certPEM, "ca.crt": ca.pem, "join.json": info} {
		require.NoError(t, os.WriteFile(filepath.Join(tlsDir, name), data, 0o600))
	}
	ts, err := truststore.Open(e.state, nil, nil)
	require.NoError(t, err)
	require.NoError(t, ts.AcceptJoin(bundle, time.Now()))

	// Version A installed and active; B, C, D as packages on a server.
	e.install(verA)
	require.NoError(t, e.layout.Activate(verA))
	e.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		e.pkgLock.Lock()
		p := e.packages[strings.TrimPrefix(r.URL.Path, "/")]
		e.pkgLock.Unlock()
		http.ServeFile(w, r, p)
	}))
	t.Cleanup(e.srv.Close)

	holdEnv := testhook.EnvHold + "=" + hold + "@" + e.holdDir
	bootID := filepath.Join(t.TempDir(), "boot_id")
	require.NoError(t, os.WriteFile(bootID, []byte("boot-upgrade\n"), 0o600))
	e.config = filepath.Join(t.TempDir(), "bcd.yaml")
	cfg := strings.Join([]string{
		"logLevel: debug",
		"stateDir: " + e.state,
		"installDir: " + e.layout.Root,
		"pluginDir: " + filepath.Join(e.layout.Current(), upgrade.PluginsDir),
		"pluginPinsFile: " + filepath.Join(e.layout.Current(), upgrade.PinsFile),
		"bootIdFile: " + bootID,
		"pluginEnv:",
		"  BCD_SYSTEM_BUS_ADDRESS: " + bus.Addr,
		"  " + strings.Replace(holdEnv, "=", ": ", 1),
	}, "\n") + "\n"
	require.NoError(t, os.WriteFile(e.config, []byte(cfg), 0o600))

	conn, err := dbus.Connect(bus.Addr)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	e.mgr, err = fakesystemd.Serve(conn, []string{holdEnv}, e.log)
	require.NoError(t, err)
	e.mgr.AddService("bcd.service", func() []string {
		return []string{filepath.Join(e.layout.Current(), upgrade.DaemonBinary), "run", "--config", e.config}
	})
	t.Cleanup(func() {
		e.mgr.StopAll()
		if t.Failed() {
			t.Logf("processes' output:\n%s", e.log.String())
		}
	})
	_, derr := e.mgr.StartUnit("bcd.service", "replace")
	require.Nil(t, derr)
	return e
}

// files are a version's files: bcd, the helper, the plugin and its pin.
func (e *upgradeNodeEnv) files(v string) map[string][]byte {
	read := func(p string) []byte {
		b, err := os.ReadFile(p)
		require.NoError(e.t, err)
		return b
	}
	plugin := read(e.builds.plugin)
	sum := sha256.Sum256(plugin)
	pins, err := json.Marshal(map[string]string{"bc-kind-upgrade": hex.EncodeToString(sum[:])})
	require.NoError(e.t, err)
	return map[string][]byte{
		upgrade.DaemonBinary: read(e.builds.bcd[v]), upgrade.HelperBinary: read(e.builds.helper),
		upgrade.PluginsDir + "/bc-kind-upgrade": plugin, upgrade.PinsFile: pins,
	}
}

func (e *upgradeNodeEnv) install(v string) {
	dir := e.layout.VersionDir(v)
	for name, b := range e.files(v) {
		p := filepath.Join(dir, name)
		require.NoError(e.t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(e.t, os.WriteFile(p, b, 0o755))
	}
}

// pack writes version v's package, a tar.gz of its files.
func (e *upgradeNodeEnv) pack(v string) string {
	var buf bytes.Buffer
	// Stored, not compressed: the test's race detector makes flate slow,
	// and the format is the same.
	zw, err := gzip.NewWriterLevel(&buf, gzip.NoCompression)
	require.NoError(e.t, err)
	tw := tar.NewWriter(zw)
	for name, b := range e.files(v) {
		require.NoError(e.t, tw.WriteHeader(&tar.Header{Name: name, Mode: 0o755, Size: int64(len(b)), Typeflag: tar.TypeReg}))
		_, err := tw.Write(b)
		require.NoError(e.t, err)
	}
	require.NoError(e.t, tw.Close())
	require.NoError(e.t, zw.Close())
	p := filepath.Join(e.t.TempDir(), v+".tar.gz")
	require.NoError(e.t, os.WriteFile(p, buf.Bytes(), 0o644))
	return p
}

// upgradeCommand is a signed daemon.upgrade to v with its signed release.
func (e *upgradeNodeEnv) upgradeCommand(id, v string, window int) *agentv1.CommandEnvelope {
	e.pkgLock.Lock()
	if e.packages[v] == "" {
		e.packages[v] = e.pack(v)
	}
	path := e.packages[v]
	e.pkgLock.Unlock()
	b, err := os.ReadFile(path)
	require.NoError(e.t, err)
	sum := sha256.Sum256(b)
	rel, err := trust.SignRelease(trust.Release{Version: v, SHA256: hex.EncodeToString(sum[:]), Size: int64(len(b)), IssuedAt: time.Now().UTC()}, e.release)
	require.NoError(e.t, err)
	payload, err := json.Marshal(map[string]any{
		"targetVersion": v, "release": rel, "rejoinWindowSeconds": window,
		"package": map[string]any{"url": e.srv.URL + "/" + v, "size": len(b), "sha256": hex.EncodeToString(sum[:])},
	})
	require.NoError(e.t, err)
	return sign(e.t, e.worker, &agentv1.Command{Id: id, NodeId: upgradeNode, Seq: 1, Kind: upgrade.KindName, Payload: payload,
		NotAfter: ts(time.Now().Add(10 * time.Minute)), CreatedAt: ts(time.Now())})
}

// outcomes are the terminal updates of id on every session so far.
func (e *upgradeNodeEnv) outcomes(id string) []*agentv1.CommandUpdate {
	var out []*agentv1.CommandUpdate
	for i := 1; i <= e.gw.sessions(); i++ {
		for _, m := range e.gw.session(e.t, i).all(func(m *agentv1.NodeMessage) bool {
			u := m.GetUpdate()
			return u != nil && u.GetCommandId() == id && terminal(u.GetState()) && u.GetProgressMessage() == ""
		}) {
			out = append(out, m.GetUpdate())
		}
	}
	return out
}

// settle waits for id's terminal state (on any session) and returns it,
// requiring every terminal report to say the same: exactly one terminal
// state.
func (e *upgradeNodeEnv) settle(id string) *agentv1.CommandUpdate {
	e.t.Helper()
	testutil.WaitFor(e.t, 90*time.Second, "the outcome of "+id, func() bool { return len(e.outcomes(id)) > 0 })
	us := e.outcomes(id)
	for _, u := range us {
		require.Equal(e.t, us[0].GetState(), u.GetState(), "one terminal state: %v", us)
	}
	return us[0]
}

// latest is the newest session's Hello.
func (e *upgradeNodeEnv) latest() *agentv1.Hello { return e.gw.session(e.t, e.gw.sessions()).hello }

// awaitVersion waits for a session whose Hello reports version v.
func (e *upgradeNodeEnv) awaitVersion(v string) *conn {
	e.t.Helper()
	var c *conn
	testutil.WaitFor(e.t, 90*time.Second, "a Hello from bcd "+v, func() bool {
		for i := e.gw.sessions(); i >= 1; i-- {
			if s := e.gw.session(e.t, i); s.hello.GetDaemonVersion() == v {
				c = s
				return true
			}
		}
		return false
	})
	return c
}

func result(t *testing.T, u *agentv1.CommandUpdate) handoff.Result {
	t.Helper()
	var r handoff.Result
	require.NoError(t, json.Unmarshal(u.GetResult(), &r), string(u.GetResult()))
	return r
}

func TestUpgrade_AToB_CNeverActivated_DRolledBackAndSkipped(t *testing.T) {
	e := newUpgradeNode(t, buildUpgrade(t), "none")
	first := e.awaitVersion(verA)

	// "upgrade from build A to build B succeeds and the new daemon reports B in Hello"
	first.command(e.upgradeCommand("cmd_up_b", verB, 60))
	onB := e.awaitVersion(verB)
	u := e.settle("cmd_up_b")
	require.Equal(t, agentv1.CommandState_COMMAND_STATE_SUCCEEDED, u.GetState(), "%s: %s", u.GetReason(), u.GetMessage())
	r := result(t, u)
	require.Equal(t, verA, r.From)
	require.Equal(t, verB, r.To)
	require.Equal(t, verB, r.Running, "the new daemon settled it")
	cur, err := e.layout.CurrentVersion()
	require.NoError(t, err)
	require.Equal(t, verB, cur)
	testutil.WaitFor(t, 30*time.Second, "the helper to finish", func() bool {
		st, err := e.layout.ReadState()
		return err == nil && st.Done()
	})
	st, err := e.layout.ReadState()
	require.NoError(t, err)
	require.Equal(t, upgrade.OutcomeSucceeded, st.Outcome)
	require.False(t, st.RejoinedAt.IsZero(), "the rejoin marker")
	require.Contains(t, e.mgr.Calls(), "StartTransientUnit bcd-upgrade-cmd_up_b.service", "the helper ran as a transient unit")
	require.DirExists(t, e.layout.VersionDir(verA), "the backup is kept")

	// "a build C whose self-check fails is never activated"
	starts := e.mgr.Starts("bcd.service")
	onB.command(e.upgradeCommand("cmd_up_c", verC, 60))
	u = onB.outcome(t, "cmd_up_c", 1)
	require.Equal(t, agentv1.CommandState_COMMAND_STATE_FAILED, u.GetState())
	require.Equal(t, "self-check-failed", u.GetReason())
	require.Contains(t, u.GetMessage(), testhook.FailSelfCheck)
	cur, err = e.layout.CurrentVersion()
	require.NoError(t, err)
	require.Equal(t, verB, cur)
	require.NoDirExists(t, e.layout.VersionDir(verC), "the failed stage is removed")
	require.Equal(t, starts, e.mgr.Starts("bcd.service"), "bcd was not restarted")

	// "a build D that starts and never rejoins is rolled back to B by the
	// helper, the target marked skipped"
	onB.command(e.upgradeCommand("cmd_up_d", verD, 10))
	onD := e.awaitVersion(verD)
	require.NotNil(t, onD)
	u = e.settle("cmd_up_d")
	require.Equal(t, agentv1.CommandState_COMMAND_STATE_FAILED, u.GetState())
	require.Equal(t, upgrade.ReasonRolledBack, u.GetReason())
	require.Contains(t, u.GetMessage(), "did not rejoin")
	r = result(t, u)
	require.Equal(t, verB, r.Running, "the old version, restarted, reports it")
	require.Contains(t, r.Tried, "activated "+verD)
	require.Contains(t, r.Tried, "skipped "+verD)
	require.Equal(t, verB, e.latest().GetDaemonVersion())
	cur, err = e.layout.CurrentVersion()
	require.NoError(t, err)
	require.Equal(t, verB, cur)
	skipped, err := e.layout.Skipped()
	require.NoError(t, err)
	require.Equal(t, []string{verD}, skipped)

	// A skipped target is never retried automatically.
	last := e.gw.session(t, e.gw.sessions())
	last.command(e.upgradeCommand("cmd_up_d2", verD, 10))
	u = last.outcome(t, "cmd_up_d2", 1)
	require.Equal(t, "target-skipped", u.GetReason())
}

// "a kill -9 of bcd at each step of the upgrade leaves the node running A
// or B, never neither, and the command reaches exactly one terminal state"
func TestUpgrade_Kill9AtEachStep(t *testing.T) {
	builds := buildUpgrade(t)
	steps := []string{"downloading", "staged", "self-checked", "journaled", "handed-off", "swapped", "before-rejoin"}
	for _, step := range steps {
		t.Run(step, func(t *testing.T) {
			began := time.Now()
			mark := func(what string) { t.Logf("%s: %s after %s", step, what, time.Since(began).Round(time.Millisecond)) }
			e := newUpgradeNode(t, builds, step)
			e.awaitVersion(verA).command(e.upgradeCommand("cmd_kill", verB, 30))
			mark("sent")
			reached := filepath.Join(e.holdDir, step+".reached")
			testutil.WaitFor(t, 90*time.Second, "bcd to reach "+step, func() bool {
				_, err := os.Stat(reached)
				return err == nil
			})
			mark("reached")
			pid := e.mgr.Kill9("bcd.service")
			require.NotZero(t, pid, "bcd ran at %s", step)
			// The gateway replays what is not terminal to every new
			// session, as the real one does: nothing runs twice.
			sessions := e.gw.sessions()
			testutil.WaitFor(t, 90*time.Second, "bcd to come back", func() bool {
				p := e.mgr.MainPID("bcd.service")
				return p != 0 && p != pid && e.gw.sessions() > sessions
			})
			mark("back")
			e.gw.session(t, e.gw.sessions()).command(e.upgradeCommand("cmd_kill", verB, 30))
			require.NoError(t, os.WriteFile(filepath.Join(e.holdDir, step+".release"), nil, 0o600))

			u := e.settle("cmd_kill")
			mark("settled")
			cur, err := e.layout.CurrentVersion()
			require.NoError(t, err)
			require.FileExists(t, filepath.Join(e.layout.VersionDir(cur), upgrade.DaemonBinary), "the active version is whole")
			want := verA
			if u.GetState() == agentv1.CommandState_COMMAND_STATE_SUCCEEDED {
				want = verB
			}
			require.Equal(t, want, cur, "%s at %s: %s %s", u.GetState(), step, u.GetReason(), u.GetMessage())
			c := e.awaitVersion(want)
			require.NotZero(t, e.mgr.MainPID("bcd.service"), "bcd runs")
			require.Equal(t, want, c.hello.GetDaemonVersion())
			t.Logf("kill -9 at %s: %s %s, running %s", step, u.GetState(), u.GetReason(), want)
			// Any helper finished, and the state file agrees.
			testutil.WaitFor(t, 60*time.Second, "the upgrade state to be done", func() bool {
				st, err := e.layout.ReadState()
				return errors.Is(err, upgrade.ErrNoState) || (err == nil && st.Done())
			})
			require.Len(t, e.settleAll("cmd_kill"), 1, "one terminal state")
			mark("checked")
			t.Cleanup(func() { mark("cleaned up") })
		})
	}
}

// settleAll is the set of terminal states id was reported in.
func (e *upgradeNodeEnv) settleAll(id string) map[agentv1.CommandState]bool {
	out := map[agentv1.CommandState]bool{}
	for _, u := range e.outcomes(id) {
		out[u.GetState()] = true
	}
	return out
}
