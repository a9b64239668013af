package e2e

// The secretRefs "Done when" end to end: the real bc-server with a secrets
// key file, registering the first-party kinds, command signing on; a real
// `bcd run` with the real bc-kind-disk and bc-kind-logs plugins; a
// disk.deploy to a loop device (root) whose image server demands an
// Authorization header that only a secretRef supplies. The spec
// (commands.md): "Commands never carry secret values: they carry
// secretRefs, which the agent exchanges for a value sealed to a one-time
// key"; the issue: the value "never reaches the journal, a log, the result
// or a support bundle".

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/require"
	"github.com/ulikunitz/xz"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/better-compute/commands/controlplane/front/api"
	"github.com/better-compute/commands/controlplane/server"
	"github.com/better-compute/commands/controlplane/server/servertest"
	"github.com/better-compute/commands/controlplane/trust/attest"
	"github.com/better-compute/commands/internal/testutil"
	apiv1 "github.com/better-compute/commands/proto/bc/api/v1"
)

// secretsCluster is newSignedCluster's control plane with secrets on
// (secrets.keyFile), disk.deploy allowlisted, the disk and logs plugins,
// and every log line the control plane writes captured at trace level.
func secretsCluster(t *testing.T) (*cluster, *lockedBuffer) {
	t.Helper()
	signing, _ := servertest.Signing(t)
	keyFile := filepath.Join(t.TempDir(), "secrets.key")
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	require.NoError(t, os.WriteFile(keyFile, key, 0o600))
	c := &cluster{t: t, bcd: testutil.BuildBinary(t, "./bcd/cmd/bcd"), plugins: t.TempDir()}
	for _, pkg := range []string{"./plugins/disk/cmd/bc-kind-disk", "./plugins/logs/cmd/bc-kind-logs"} {
		src := testutil.BuildBinary(t, pkg)
		b, err := os.ReadFile(src)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(c.plugins, filepath.Base(pkg)), b, 0o755))
	}
	first := servertest.Start(t, signing)
	require.NoError(t, first.Stop())
	cfg := first.Config
	cfg.GRPCListen, cfg.Gateway.Listen, cfg.HTTPListen = first.GRPC, first.Gateway, first.HTTP
	sb := *cfg.SupportBundles
	dir := *sb.Blob.Dir
	dir.BaseURL = "http://" + first.HTTP + "/v1/blobs"
	sb.Blob.Dir = &dir
	cfg.SupportBundles = &sb
	cfg.Secrets = &server.SecretsConfig{KeyFile: keyFile}
	cfg.Allowlist = append(append([]string{}, api.DefaultAllowlist...), "disk.deploy")
	logs := &lockedBuffer{}
	srv, err := server.New(context.Background(), cfg, nil, hclog.New(&hclog.LoggerOptions{Output: logs, Level: hclog.Trace, JSONFormat: true}))
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	stopped := false
	stop := func() error {
		if stopped {
			return nil
		}
		stopped = true
		cancel()
		return <-done
	}
	t.Cleanup(func() { _ = stop() })
	testutil.WaitFor(t, 30*time.Second, "the server to be ready", func() bool {
		resp, err := http.Get("http://" + first.HTTP + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	c.srv = &servertest.Running{Server: srv, GRPC: first.GRPC, HTTP: first.HTTP, Gateway: first.Gateway, CADir: first.CADir,
		CA: srv.CA(), Pool: first.Pool, Queue: srv.Queue(), Stop: stop, Config: cfg}
	c.cfg = cfg
	conn, err := grpc.NewClient(c.srv.GRPC, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	c.conn, c.api = conn, apiv1.NewCommandsClient(conn)
	return c, logs
}

// loopDevice sets up a loop device over a file of size bytes, or skips
// with the reason (not root, no losetup, no loop support).
func loopDevice(t *testing.T, size int64) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root for a loop device (disk.deploy writes a real block device); CI runs this as root")
	}
	img := filepath.Join(t.TempDir(), "disk.img")
	require.NoError(t, os.WriteFile(img, nil, 0o600))
	require.NoError(t, os.Truncate(img, size))
	out, err := exec.Command("losetup", "-f", "--show", img).CombinedOutput()
	if err != nil {
		t.Skipf("no loop device here (losetup): %v: %s", err, out)
	}
	dev := strings.TrimSpace(string(out))
	t.Cleanup(func() { _ = exec.Command("losetup", "-d", dev).Run() })
	return dev
}

// pgDump dumps the whole database, schema and rows, as pg_dump does.
func pgDump(t *testing.T, c *cluster) []byte {
	t.Helper()
	cc := c.srv.Pool.Config().ConnConfig
	cmd := exec.Command("pg_dump", "--no-owner", "-h", cc.Host, "-p", fmt.Sprint(cc.Port), "-U", cc.User, "-d", cc.Database)
	cmd.Env = append(os.Environ(), "PGPASSWORD="+cc.Password)
	out, err := cmd.Output()
	if ee, ok := err.(*exec.ExitError); ok {
		t.Fatalf("pg_dump: %v: %s", err, ee.Stderr)
	}
	require.NoError(t, err)
	return out
}

// filesUnder returns every regular file's bytes under dir, a gzipped tar
// (a support bundle) unpacked into its members as well.
func filesUnder(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	require.NoError(t, filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		out[p] = b
		if zr, err := gzip.NewReader(bytes.NewReader(b)); err == nil {
			tr := tar.NewReader(zr)
			for {
				h, err := tr.Next()
				if err != nil {
					break
				}
				m, _ := io.ReadAll(tr)
				out[p+"!"+h.Name] = m
			}
		}
		return nil
	}))
	return out
}

// "A BMC password given as a secretRef appears in no row, log line,
// journal record, result or support bundle (a test greps all of them)":
// here the secret is the image server's bearer token that disk.deploy
// needs; the BMC kinds use the same exchange.
func TestE2E_ASecretRefsValueAppearsInNoRowLogJournalResultOrBundle(t *testing.T) {
	dev := loopDevice(t, 16<<20)
	c, cpLogs := secretsCluster(t)
	n := c.join()
	n.configure(baseEnv(t))
	n.start()
	c.nodeTrust()

	var tail [16]byte
	_, _ = rand.Read(tail[:])
	value := "Bearer s3cr3t-" + hex.EncodeToString(tail[:])
	secretFile := filepath.Join(t.TempDir(), "token.txt")
	require.NoError(t, os.WriteFile(secretFile, []byte(value+"\n"), 0o600))
	// The operator's way in: docs/secrets.md's `secrets put … --from-file`.
	out, errs, code := c.cli("secrets", "put", "image-token", "--from-file", secretFile)
	require.Equal(t, 0, code, "secrets put: %s", errs)
	require.Contains(t, out, "image-token")
	out, errs, code = c.cli("secrets", "list", "--json")
	require.Equal(t, 0, code, errs)
	require.Contains(t, out, `"valueBytes": "`+fmt.Sprint(len(value))+`"`, "the trailing newline of the file is not part of the value")
	require.NotContains(t, out, hex.EncodeToString(tail[:]))

	img := bytes.Repeat([]byte("bc-secretref-image "), 64<<10)
	var xzBuf bytes.Buffer
	w, err := xz.NewWriter(&xzBuf)
	require.NoError(t, err)
	_, _ = w.Write(img)
	require.NoError(t, w.Close())
	file := xzBuf.Bytes()
	sum := sha256.Sum256(file)
	var authorized atomic.Int32
	images := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != value {
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		authorized.Add(1)
		_, _ = w.Write(file)
	}))
	defer images.Close()

	payload, err := structpb.NewStruct(map[string]any{"url": images.URL + "/node.raw.xz", "device": dev,
		"sha256": hex.EncodeToString(sum[:]), "authorizationSecretRef": "image-token"})
	require.NoError(t, err)
	cmd, err := c.api.Run(c.ctx(), &apiv1.RunCommandRequest{TenantId: servertest.TenantA, NodeId: servertest.NodeA1, Kind: "disk.deploy",
		Payload: payload, SecretRefs: []string{"image-token"}})
	require.NoError(t, err)
	require.Equal(t, []string{"image-token"}, cmd.GetSecretRefs(), "commands.run shows the refs")
	deployed := c.succeeded(cmd.GetId())
	require.Equal(t, true, resultOf(deployed)["verified"], "the image was written and read back: %v", resultOf(deployed))
	require.EqualValues(t, 1, authorized.Load(), "the value reached the image server, the one place it is for")

	// A command that names no ref gets nothing: the same deploy without
	// secretRefs fails naming the ref, and the server was not asked.
	payload2, _ := structpb.NewStruct(map[string]any{"url": images.URL + "/node.raw.xz", "device": dev,
		"sha256": hex.EncodeToString(sum[:]), "authorizationSecretRef": "image-token"})
	bare, err := c.api.Run(c.ctx(), &apiv1.RunCommandRequest{TenantId: servertest.TenantA, NodeId: servertest.NodeA1, Kind: "disk.deploy", Payload: payload2})
	require.NoError(t, err)
	failed := c.waitState(bare.GetId(), "failed")
	require.Contains(t, failed.GetMessage(), `the command carries no secretRef "image-token"`)

	// A ref the tenant never put fails the command before the plugin runs,
	// with the exchange's reason.
	payload3, _ := structpb.NewStruct(map[string]any{"url": images.URL + "/node.raw.xz", "device": dev,
		"sha256": hex.EncodeToString(sum[:]), "authorizationSecretRef": "never-put"})
	missing, err := c.api.Run(c.ctx(), &apiv1.RunCommandRequest{TenantId: servertest.TenantA, NodeId: servertest.NodeA1, Kind: "disk.deploy",
		Payload: payload3, SecretRefs: []string{"never-put"}})
	require.NoError(t, err)
	m := c.waitState(missing.GetId(), "failed")
	require.Equal(t, "secret-not-found", m.GetReason(), m.GetMessage())
	require.Contains(t, m.GetMessage(), "nothing ran")
	require.EqualValues(t, 1, authorized.Load(), "the image server was not asked again")

	// A support bundle, which holds bcd's journal records and the journald
	// lines.
	bundle := c.succeeded(c.run("logs.collect", map[string]any{"since": "1h"}).GetId())
	require.NotEmpty(t, bundle.GetBundleKey())

	// Now grep everything.
	haystacks := map[string][]byte{"pg_dump": pgDump(t, c), "control plane log": []byte(cpLogs.String()), "bcd log (plugins included)": []byte(n.logs.String())}
	for _, id := range []string{cmd.GetId(), bare.GetId(), missing.GetId(), bundle.GetId()} {
		got := c.get(id)
		b, err := protojson.Marshal(got)
		require.NoError(t, err)
		haystacks["commands.get "+id] = b
		haystacks["result bytes "+id] = got.GetResultBytes()
	}
	for p, b := range filesUnder(t, n.state) {
		haystacks["bcd state "+p] = b
	}
	bundles := filesUnder(t, c.cfg.SupportBundles.Blob.Dir.Path)
	require.NotEmpty(t, bundles)
	for p, b := range bundles {
		haystacks["support bundle "+p] = b
	}
	// The haystacks are real: each holds what it should (the ref's name,
	// the command id), so a grep that finds nothing means something.
	require.Contains(t, string(haystacks["pg_dump"]), "image-token", "the dump holds the command rows")
	require.Contains(t, string(haystacks["pg_dump"]), "COPY public.secrets", "the dump holds the secrets table")
	require.Contains(t, cpLogs.String(), "secrets sealed for a command", "the control plane's log was captured")
	require.Contains(t, n.logs.String(), "secrets fetched for a command", "bcd's log was captured")
	testutil.WaitFor(t, 10*time.Second, "the plugin's log line in bcd's log", func() bool { return strings.Contains(n.logs.String(), "image deployed") })
	journalHasIt, bundleHasJournal := false, false
	for name, b := range haystacks {
		if strings.HasPrefix(name, "bcd state ") && bytes.Contains(b, []byte(cmd.GetId())) {
			journalHasIt = true
		}
		if strings.HasPrefix(name, "support bundle ") && strings.Contains(name, "!") && bytes.Contains(b, []byte(cmd.GetId())) {
			bundleHasJournal = true
		}
	}
	require.True(t, journalHasIt, "bcd's journal file holds the deploy's record")
	require.True(t, bundleHasJournal, "the support bundle holds bcd's journal with the deploy's record")

	// The logs once more, now that every line the checks waited for is in.
	haystacks["control plane log"], haystacks["bcd log (plugins included)"] = []byte(cpLogs.String()), []byte(n.logs.String())
	needles := [][]byte{[]byte(value), []byte(hex.EncodeToString(tail[:]))}
	for name, b := range haystacks {
		for _, needle := range needles {
			require.False(t, bytes.Contains(b, needle), "the secret's value appears in %s", name)
		}
	}
}

// "disk.wipe (attested) ... an attested wipe result verifies, and a
// tampered one is refused": the real bc-kind-disk erases a loop device's
// metadata under the real bcd, which signs the record with its node key;
// the metal module's verifier, attest.NodeSignedResults, accepts the
// stored row and refuses it once a byte of the record changes (a wipe
// reported as erased that was only metadata, say).
func TestE2E_AnAttestedWipeVerifiesAndATamperedOneIsRefused(t *testing.T) {
	dev := loopDevice(t, 16<<20)
	if out, err := exec.Command("mkfs.ext4", "-q", "-F", dev).CombinedOutput(); err != nil {
		t.Skipf("mkfs.ext4: %v: %s", err, out)
	}
	c, _ := secretsCluster(t)
	n := c.join()
	n.configure(baseEnv(t))
	n.start()
	c.nodeTrust()

	id := c.enqueue("disk.wipe", map[string]any{"device": dev, "mode": "metadata"})
	got := c.succeeded(id)
	require.Equal(t, "metadata", resultOf(got)["scope"], "metadata is reported as metadata")
	require.Equal(t, false, resultOf(got)["erased"], "never as a wipe")
	require.NotEmpty(t, got.GetNodeSig(), "disk.wipe is attested: the node signed its record")

	ctx := context.Background()
	row, err := c.srv.Queue.Get(ctx, c.srv.Pool, servertest.NodeA1, id)
	require.NoError(t, err)
	require.NoError(t, attest.NodeSignedResults(ctx, c.srv.Pool, c.srv.CA.Pool(), attest.FromCommand(row)), "the stored wipe record verifies")

	tampered := attest.FromCommand(row)
	tampered.ResultBytes = bytes.Replace(tampered.ResultBytes, []byte(`"erased":false`), []byte(`"erased":true`), 1)
	require.NotEqual(t, row.ResultBytes, tampered.ResultBytes, "the tamper changed the record")
	tampered.ResultSHA256 = nil
	require.Error(t, attest.NodeSignedResults(ctx, c.srv.Pool, c.srv.CA.Pool(), tampered), "a forged wipe result is refused")

	forged := attest.FromCommand(row)
	forged.ResultSHA256 = nil
	forged.NodeSig = append([]byte(nil), row.NodeSig...)
	forged.NodeSig[len(forged.NodeSig)-1] ^= 1
	require.Error(t, attest.NodeSignedResults(ctx, c.srv.Pool, c.srv.CA.Pool(), forged), "a signature that is not the node's is refused")
}
