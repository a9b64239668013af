package e2e

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/controlplane/server"
	"github.com/better-compute/commands/controlplane/server/servertest"
	"github.com/better-compute/commands/internal/testutil"
	"github.com/better-compute/commands/internal/trust"
	"github.com/better-compute/commands/internal/upgrade"
)

// release is one build of bcd: the version it reports and its binary.
type release struct {
	version string
	bcd     string
}

// releases are the builds a rollout test installs and packages: the real
// bcd, bcd-upgrader and bc-kind-upgrade, each bcd stamped with its
// version, and one with the never-rejoin test hook.
type releases struct {
	plugin, helper string
	builds         map[string]release
}

func buildReleases(t *testing.T, want map[string]string) releases {
	t.Helper()
	r := releases{builds: map[string]release{},
		plugin: testutil.BuildBinary(t, "./plugins/upgrade/cmd/bc-kind-upgrade"),
		helper: testutil.BuildBinary(t, "./bcd/cmd/bcd-upgrader")}
	// name -> "version[,fault]"
	for name, spec := range want {
		v, fault, _ := strings.Cut(spec, ",")
		ld := "-X github.com/better-compute/commands/internal/version.Version=" + v
		if fault != "" {
			ld += " -X github.com/better-compute/commands/internal/testhook.Fault=" + fault
		}
		r.builds[name] = release{version: v, bcd: testutil.BuildLDFlags(t, "./bcd/cmd/bcd", "rollout-"+name, ld)}
	}
	return r
}

// files are a release's files, as a version directory and a package hold
// them: bcd, the helper, the plugin and its pin.
func (r releases) files(t *testing.T, name string) map[string][]byte {
	read := func(p string) []byte {
		b, err := os.ReadFile(p)
		require.NoError(t, err)
		return b
	}
	plugin := read(r.plugin)
	sum := sha256.Sum256(plugin)
	pins, err := json.Marshal(map[string]string{"bc-kind-upgrade": hex.EncodeToString(sum[:])})
	require.NoError(t, err)
	return map[string][]byte{upgrade.DaemonBinary: read(r.builds[name].bcd), upgrade.HelperBinary: read(r.helper),
		upgrade.PluginsDir + "/bc-kind-upgrade": plugin, upgrade.PinsFile: pins}
}

// releaseSite is a release key in bc-server's pki.releaseKeys and an HTTP
// server for the packages.
type releaseSite struct {
	t   *testing.T
	key ed25519.PrivateKey
	srv *httptest.Server
	// lock guards served.
	lock   sync.Mutex
	served map[string][]byte
}

// withReleaseKey turns command signing on and names a new release key in
// pki.releaseKeys, so that nodes trust what it signs.
func withReleaseKey(t *testing.T) (*releaseSite, func(*server.Config)) {
	t.Helper()
	signing, _ := servertest.Signing(t)
	pub, key, err := trust.NewEd25519()
	require.NoError(t, err)
	b, err := trust.MarshalPublicKeyPEM(pub)
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "release.pem.pub")
	require.NoError(t, os.WriteFile(path, b, 0o644))
	s := &releaseSite{t: t, key: key, served: map[string][]byte{}}
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.lock.Lock()
		b, ok := s.served[strings.TrimPrefix(r.URL.Path, "/")]
		s.lock.Unlock()
		if !ok {
			http.NotFound(w, r)
			return
		}
		_, _ = w.Write(b)
	}))
	t.Cleanup(s.srv.Close)
	return s, func(c *server.Config) {
		signing(c)
		c.PKI.ReleaseKeys = []string{path}
		c.Modules.Rollout.Interval = server.Duration(time.Second)
	}
}

// pkg is a package as `rollout set` names it.
type pkg struct {
	version, url, sha256, release string
	size                          int
}

// publish packs release name and serves it under file; tamper serves other
// bytes than the ones signed (one byte changed), as a corrupted mirror
// would.
func (s *releaseSite) publish(r releases, name, file string, tamper bool) pkg {
	t := s.t
	var buf bytes.Buffer
	zw, err := gzip.NewWriterLevel(&buf, gzip.NoCompression)
	require.NoError(t, err)
	tw := tar.NewWriter(zw)
	for n, b := range r.files(t, name) {
		require.NoError(t, tw.WriteHeader(&tar.Header{Name: n, Mode: 0o755, Size: int64(len(b)), Typeflag: tar.TypeReg}))
		_, err := tw.Write(b)
		require.NoError(t, err)
	}
	require.NoError(t, tw.Close())
	require.NoError(t, zw.Close())
	b := buf.Bytes()
	sum := sha256.Sum256(b)
	v := r.builds[name].version
	rel, err := trust.SignRelease(trust.Release{Version: v, SHA256: hex.EncodeToString(sum[:]), Size: int64(len(b)), IssuedAt: time.Now().UTC()}, s.key)
	require.NoError(t, err)
	served := b
	if tamper {
		served = append([]byte(nil), b...)
		served[len(served)/2] ^= 0xff
	}
	s.lock.Lock()
	s.served[file] = served
	s.lock.Unlock()
	return pkg{version: v, url: s.srv.URL + "/" + file, sha256: hex.EncodeToString(sum[:]), size: len(b), release: base64.StdEncoding.EncodeToString(rel)}
}

// upNode is a node set up for in-place upgrades as the operator guide
// says: a versioned install directory whose current symlink bcd.service
// runs through, under bc-fake-systemd (the binary: a fake systemd manager
// on a private bus that the upgrade plugin and its helper talk to).
type upNode struct {
	id     string
	layout upgrade.Layout
	config string
	logs   *lockedBuffer
}

// upgradeNode creates node id (when it is not a fixture), installs release
// name in its install directory, joins it with that bcd and starts
// bcd.service under bc-fake-systemd.
func (c *cluster) upgradeNode(id string, r releases, name string, create bool) *upNode {
	t := c.t
	t.Helper()
	if _, err := exec.LookPath("dbus-daemon"); err != nil {
		t.Skip("dbus-daemon is not installed")
	}
	if create {
		_, stderr, code := c.cliAs(servertest.TokAdmin, "api", "nodes.create", "tenantId="+servertest.TenantA, "nodeId="+id)
		require.Equal(t, 0, code, stderr)
	}
	n := &upNode{id: id, layout: upgrade.Layout{Root: t.TempDir()}, config: filepath.Join(t.TempDir(), "bcd.yaml"), logs: &lockedBuffer{}}
	v := r.builds[name].version
	for f, b := range r.files(t, name) {
		p := filepath.Join(n.layout.VersionDir(v), f)
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, b, 0o755))
	}
	require.NoError(t, n.layout.Activate(v))
	bcd := filepath.Join(n.layout.Current(), upgrade.DaemonBinary)

	sd := testutil.BuildBinary(t, "./internal/tools/bc-fake-systemd")
	sdDir := t.TempDir()
	serve := exec.Command(sd, "serve", "--dir", sdDir, "--unit", "bcd.service", "--", bcd, "run", "--config", n.config)
	serve.Stdout, serve.Stderr = n.logs, n.logs
	require.NoError(t, serve.Start())
	done := make(chan struct{})
	go func() {
		_ = serve.Wait()
		close(done)
	}()
	t.Cleanup(func() {
		_ = serve.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(45 * time.Second):
			_ = serve.Process.Kill()
			<-done
		}
		if t.Failed() {
			t.Logf("%s's processes:\n%s", id, n.logs.String())
		}
	})
	var addr string
	testutil.WaitFor(t, 30*time.Second, "bc-fake-systemd's address", func() bool {
		b, err := os.ReadFile(filepath.Join(sdDir, "address"))
		addr = strings.TrimSpace(string(b))
		return err == nil
	})

	boot := filepath.Join(t.TempDir(), "boot_id")
	require.NoError(t, os.WriteFile(boot, []byte("boot-"+id+"\n"), 0o600))
	cfg := strings.Join([]string{
		"role: node", "logLevel: debug",
		"stateDir: " + t.TempDir(),
		"installDir: " + n.layout.Root,
		"pluginDir: " + filepath.Join(n.layout.Current(), upgrade.PluginsDir),
		"pluginPinsFile: " + filepath.Join(n.layout.Current(), upgrade.PinsFile),
		"bootIdFile: " + boot,
		"pluginEnv:",
		"  BCD_SYSTEM_BUS_ADDRESS: " + addr,
	}, "\n") + "\n"
	require.NoError(t, os.WriteFile(n.config, []byte(cfg), 0o600))
	out, errs, code := run(t, bcd, "join", "--token", c.srv.JoinToken(t, id), "--server", c.srv.Gateway,
		"--ca-file", filepath.Join(c.srv.CADir, "ca.pem"), "--config", n.config)
	require.Equal(t, 0, code, "bcd join: %s%s", out, errs)
	out, errs, code = run(t, sd, "start", "--dir", sdDir, "bcd.service")
	require.Equal(t, 0, code, "bc-fake-systemd start: %s%s", out, errs)
	c.waitVersion(id, v)
	return n
}

// run runs a binary and returns its output and exit code.
func run(t *testing.T, bin string, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	var ee interface{ ExitCode() int }
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else {
		require.NoError(t, err)
	}
	return out.String(), errb.String(), code
}

// waitVersion waits until node id's session reports bcd version v.
func (c *cluster) waitVersion(id, v string) {
	c.t.Helper()
	testutil.WaitFor(c.t, 90*time.Second, id+" to run bcd "+v, func() bool { return c.daemonVersion(id) == v })
}

// daemonVersion is the version node id's last Hello reported.
func (c *cluster) daemonVersion(id string) string {
	var v string
	_ = c.srv.Pool.QueryRow(context.Background(), `SELECT daemon_version FROM nodes WHERE id = $1`, id).Scan(&v)
	return v
}

// setRollout runs `better-compute rollout set` for p in pool, with a rejoin
// window of 10 s unless extra names one.
func (c *cluster) setRollout(pool string, p pkg, extra ...string) string {
	c.t.Helper()
	args := []string{"rollout", "set", "pool=" + pool, "version=" + p.version, "packageUrl=" + p.url,
		"packageSize=" + strconv.Itoa(p.size), "packageSha256=" + p.sha256, "release=" + p.release}
	if !slices.ContainsFunc(extra, func(a string) bool { return strings.HasPrefix(a, "rejoinWindowSeconds=") }) {
		args = append(args, "rejoinWindowSeconds=10")
	}
	out, stderr, code := c.cli(append(args, extra...)...)
	require.Equal(c.t, 0, code, stderr)
	return out
}

// upgrades are node id's daemon.upgrade commands, oldest first: id, state
// and reason.
func (c *cluster) upgrades(id string) [][3]string {
	c.t.Helper()
	rows, err := c.srv.Pool.Query(context.Background(), `SELECT id, state, reason FROM commands WHERE node_id = $1 AND kind = $2 ORDER BY seq`, id, upgrade.KindName)
	require.NoError(c.t, err)
	defer rows.Close()
	var out [][3]string
	for rows.Next() {
		var r [3]string
		require.NoError(c.t, rows.Scan(&r[0], &r[1], &r[2]))
		out = append(out, r)
	}
	require.NoError(c.t, rows.Err())
	return out
}
