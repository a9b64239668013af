package logs_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/controlplane/commands/bundles"
	"github.com/better-compute/commands/plugins/logs"
	"github.com/better-compute/commands/plugins/logs/manifest"
	"github.com/better-compute/commands/sdk/kind"
)

// fakeHost is bcd's side as logs.collect sees it.
type fakeHost struct{}

func (fakeHost) Inventory(context.Context) (json.RawMessage, time.Time, error) {
	return json.RawMessage(`{"gpus":[{"uuid":"GPU-1","busId":"0000:3b:00"}]}`), time.Date(2026, 4, 12, 9, 0, 0, 0, time.UTC), nil
}
func (fakeHost) PutInventory(context.Context, json.RawMessage) error { return nil }
func (fakeHost) NodeSpec(context.Context) (int64, json.RawMessage, error) {
	return 3, json.RawMessage(`{}`), nil
}
func (fakeHost) Conditions(context.Context) ([]kind.Condition, error) {
	return []kind.Condition{{Type: "RebootRequired", Status: true, Reason: "desired-state"}}, nil
}
func (fakeHost) Journal(_ context.Context, limit int) ([]json.RawMessage, error) {
	// Newest first, as bcd answers.
	return []json.RawMessage{json.RawMessage(`{"id": "cmd_2", "state": "running"}`), json.RawMessage(`{"id":"cmd_1","state":"succeeded"}`)}, nil
}

type env struct {
	dir    string
	args   string // file the fake journalctl appends its arguments to
	cfg    logs.Config
	store  *bundles.DirStore
	srv    *httptest.Server
	client *http.Client
}

// setup writes a fake journalctl that prints lines journal lines per unit,
// a kernel log file, and serves a real DirStore on httptest.
func setup(t *testing.T, lines int) *env {
	t.Helper()
	e := &env{dir: t.TempDir()}
	e.args = filepath.Join(e.dir, "args")
	script := fmt.Sprintf(`#!/bin/sh
echo "$@" >> %q
unit=warnings
while [ $# -gt 0 ]; do case "$1" in -u) unit="$2"; shift;; esac; shift; done
[ "$unit" = hang.service ] && exec sleep 300
awk -v u="$unit" -v n=%d 'BEGIN{for(i=1;i<=n;i++) printf "2026-04-12T%%02d:%%02d:%%02d+0000 node %%s[1]: line %%d of %%s r=%%d\n", int(i/3600)%%24, int(i/60)%%60, i%%60, u, i, u, (i*7919)%%100003}'
`, e.args, lines)
	jc := filepath.Join(e.dir, "journalctl")
	require.NoError(t, os.WriteFile(jc, []byte(script), 0o755))
	kmsg := filepath.Join(e.dir, "kmsg")
	require.NoError(t, os.WriteFile(kmsg, []byte("6,1,1000000,-;Linux version 6.1.0\n4,2,2000000,-;NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.\n"), 0o644))
	e.cfg = logs.Config{Journalctl: jc, KmsgPath: kmsg, Units: []string{"bcd.service"}, ExecTimeout: 30 * time.Second, TempDir: t.TempDir()}

	mux := http.NewServeMux()
	e.srv = httptest.NewServer(mux)
	t.Cleanup(e.srv.Close)
	var err error
	e.store, err = bundles.NewDirStore(bundles.DirOptions{Root: t.TempDir(), BaseURL: e.srv.URL + "/v1/blobs", Secret: bytes.Repeat([]byte("s"), 32)})
	require.NoError(t, err)
	mux.Handle(e.store.MountPath()+"/", e.store.Handler())
	e.client = e.srv.Client()
	return e
}

type progressLog struct {
	lock sync.Mutex
	pcts []int
}

func (p *progressLog) Report(pct int, _ string) {
	p.lock.Lock()
	defer p.lock.Unlock()
	p.pcts = append(p.pcts, pct)
}

func (e *env) run(t *testing.T, payload any, progress kind.Progress) kind.Result {
	t.Helper()
	raw, err := json.Marshal(payload)
	require.NoError(t, err)
	v, err := kind.NewValidator(manifest.Manifest)
	require.NoError(t, err)
	require.NoError(t, v.Validate(raw))
	if progress == nil {
		progress = kind.ProgressFunc(func(int, string) {})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	return kind.Run(ctx, logs.Handler(e.cfg, e.client), kind.Request{
		Command:  kind.Command{ID: "cmd_logs", Kind: manifest.KindName, NodeID: "node_1", Payload: raw},
		Progress: progress,
		Host:     fakeHost{},
		Logger:   hclog.NewNullLogger(),
	})
}

func (e *env) presign(t *testing.T, key string, maxBytes int64) bundles.UploadFields {
	t.Helper()
	_, f, err := bundles.New(e.store, maxBytes).Presign(context.Background(), "node_1", key, time.Now().Add(10*time.Minute))
	require.NoError(t, err)
	return f
}

// untar reads the stored bundle into name -> content.
func untar(t *testing.T, r io.Reader) (map[string]string, []string) {
	t.Helper()
	zr, err := gzip.NewReader(r)
	require.NoError(t, err)
	tr := tar.NewReader(zr)
	files := map[string]string{}
	var order []string
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		require.NoError(t, err)
		b, err := io.ReadAll(tr)
		require.NoError(t, err)
		files[h.Name] = string(b)
		order = append(order, h.Name)
	}
	return files, order
}

func payload(f bundles.UploadFields, key string) map[string]any {
	return map[string]any{"uploadUrl": f.UploadURL, "maxBytes": f.MaxBytes, "supportBundle": f.SupportBundle, "bundleKey": key, "since": "24h", "units": []string{"nvidia-persistenced.service"}}
}

func TestManifest(t *testing.T) {
	m := manifest.Manifest
	require.NoError(t, m.Validate())
	require.Equal(t, kind.LaneBulk, m.Lane)
	require.True(t, m.Flags.RetrySafe)
	require.False(t, m.Flags.Destructive)
	require.True(t, m.APIRunnable)
	v, err := kind.NewValidator(m)
	require.NoError(t, err)
	require.Error(t, v.Validate([]byte(`{"uploadUrl":"https://x/y","maxBytes":4096,"units":["--output=/etc/passwd"]}`)), "a unit cannot smuggle a journalctl option")
	require.Error(t, v.Validate([]byte(`{"maxBytes":4096}`)), "no upload URL, no bundle")
	require.Error(t, v.Validate([]byte(`{"uploadUrl":"https://x/y","maxBytes":4096,"since":"yesterday"}`)))
}

// A small bundle: every source, nothing truncated, uploaded whole; the
// result's size and SHA-256 match the stored object.
func TestCollectAndUpload(t *testing.T) {
	e := setup(t, 50)
	key := bundles.SupportBundleKey("node_1", "api:tenant_1:logs-1")
	f := e.presign(t, "api:tenant_1:logs-1", bundles.DefaultMaxBytes)
	prog := &progressLog{}
	r := e.run(t, payload(f, key), prog)
	require.Equal(t, kind.StatusSucceeded, r.Status, r.Message)

	var res logs.Result
	require.NoError(t, json.Unmarshal(r.Data, &res))
	require.Equal(t, key, res.BundleKey)
	require.False(t, res.Truncated)
	require.Equal(t, "24h0m0s", res.Window)
	require.NotContains(t, string(r.Data), "bc-signature", "the result never carries the upload capability")

	info, err := bundles.New(e.store, bundles.DefaultMaxBytes).Check(context.Background(), key, res.SHA256)
	require.NoError(t, err, "the stored object has the SHA-256 the result reports")
	require.Equal(t, res.SizeBytes, info.Size)

	rc, _, err := e.store.Open(context.Background(), key)
	require.NoError(t, err)
	defer rc.Close()
	files, order := untar(t, rc)
	require.Equal(t, "MANIFEST.json", order[0])
	require.Contains(t, files["journal/bcd.service.log"], "line 50 of bcd.service")
	require.Contains(t, files["journal/nvidia-persistenced.service.log"], "line 1 of nvidia-persistenced.service")
	require.Contains(t, files["journal/warnings.log"], "of warnings")
	require.Contains(t, files["kernel/kmsg.log"], "Xid (PCI:0000:3b:00): 79")
	require.Contains(t, files["gpu/inventory.json"], "GPU-1")
	require.Contains(t, files["node/conditions.json"], "RebootRequired")
	require.Equal(t, "{\"id\":\"cmd_1\",\"state\":\"succeeded\"}\n{\"id\":\"cmd_2\",\"state\":\"running\"}\n", files["bcd/journal.jsonl"], "bcd's journal, oldest first")
	require.Contains(t, files["README.txt"], "Nothing was truncated")

	args, err := os.ReadFile(e.args)
	require.NoError(t, err)
	require.Contains(t, string(args), "-o short-iso --since=@")
	require.Contains(t, string(args), "-u bcd.service")
	require.Contains(t, string(args), "-u nvidia-persistenced.service")
	since := strings.SplitN(strings.SplitN(string(args), "--since=@", 2)[1], " ", 2)[0]
	secs, err := strconv.ParseInt(since, 10, 64)
	require.NoError(t, err)
	require.InDelta(t, time.Now().Add(-24*time.Hour).Unix(), secs, 60, "the window is the last 24h")

	prog.lock.Lock()
	defer prog.lock.Unlock()
	require.Equal(t, 100, prog.pcts[len(prog.pcts)-1], "progress ends at 100")
	for i := 1; i < len(prog.pcts); i++ {
		require.GreaterOrEqual(t, prog.pcts[i], prog.pcts[i-1], "progress never goes back")
	}
}

// "A bundle larger than maxBytes arrives truncated oldest-first and within
// the cap", through the real store's handler.
func TestBundleOverCapTruncatedOldestFirst(t *testing.T) {
	const n = 30000
	e := setup(t, n)
	const maxBytes = 96 << 10
	key := bundles.SupportBundleKey("node_1", "logs-big")
	f := e.presign(t, "logs-big", maxBytes)
	r := e.run(t, payload(f, key), nil)
	require.Equal(t, kind.StatusSucceeded, r.Status, r.Message)
	var res logs.Result
	require.NoError(t, json.Unmarshal(r.Data, &res))
	require.True(t, res.Truncated)
	require.LessOrEqual(t, res.SizeBytes, int64(maxBytes))

	info, err := bundles.New(e.store, maxBytes).Check(context.Background(), key, res.SHA256)
	require.NoError(t, err)
	require.LessOrEqual(t, info.Size, int64(maxBytes), "within the cap")

	rc, _, err := e.store.Open(context.Background(), key)
	require.NoError(t, err)
	defer rc.Close()
	files, _ := untar(t, rc)
	for _, unit := range []string{"bcd.service", "nvidia-persistenced.service", "warnings"} {
		name := "journal/" + unit + ".log"
		lines := strings.Split(strings.TrimSuffix(files[name], "\n"), "\n")
		require.NotEmpty(t, lines[0], name)
		first := lineNo(t, lines[0])
		last := lineNo(t, lines[len(lines)-1])
		require.Equal(t, n, last, "%s keeps its newest line", name)
		require.Greater(t, first, 1, "%s lost its oldest lines", name)
		require.Equal(t, last-first+1, len(lines), "%s keeps a contiguous run of whole lines", name)
	}
	// Small files are never cut.
	require.Contains(t, files["gpu/inventory.json"], "GPU-1")
	require.Contains(t, files["kernel/kmsg.log"], "Linux version")

	var m logs.BundleManifest
	require.NoError(t, json.Unmarshal([]byte(files["MANIFEST.json"]), &m))
	require.True(t, m.Truncated)
	for _, fr := range m.Files {
		if fr.Name == "journal/bcd.service.log" {
			require.Positive(t, fr.DroppedLines)
			require.Equal(t, fr.CollectedBytes, fr.KeptBytes+fr.DroppedBytes)
		}
	}
	require.Contains(t, files["README.txt"], "TRUNCATED to fit the byte cap, oldest first")
	require.Contains(t, files["README.txt"], "journal/bcd.service.log:")
}

func lineNo(t *testing.T, line string) int {
	t.Helper()
	_, rest, ok := strings.Cut(line, ": line ")
	require.True(t, ok, line)
	v, err := strconv.Atoi(strings.Fields(rest)[0])
	require.NoError(t, err, line)
	return v
}

// The store refuses an upload after the URL's deadline; the command fails
// upload-refused, says so, and still reports what it packed.
func TestUploadRefused(t *testing.T) {
	e := setup(t, 10)
	f := e.presign(t, "logs-late", 1<<20)
	// The signature is intact but the cap was raised: the store refuses it.
	f.UploadURL = strings.Replace(f.UploadURL, "bc-max-bytes=1048576", "bc-max-bytes=2048576", 1)
	r := e.run(t, payload(f, ""), nil)
	require.Equal(t, kind.StatusFailed, r.Status)
	require.Equal(t, logs.ReasonUploadRefused, r.Reason)
	require.Contains(t, r.Message, "403 Forbidden")
	require.NotContains(t, r.Message, "bc-signature", "errors never carry the capability")
	var res logs.Result
	require.NoError(t, json.Unmarshal(r.Data, &res))
	require.Positive(t, res.SizeBytes)
}

// A hung journalctl, and a helper it forked, are killed at the timeout; the
// bundle still goes out with a note that says why the file is short.
func TestJournalctlTimeoutKillsGroup(t *testing.T) {
	e := setup(t, 1)
	pidFile := filepath.Join(e.dir, "child.pid")
	script := fmt.Sprintf("#!/bin/sh\necho 'first line'\nsleep 300 &\necho $! > %q\nwait\n", pidFile)
	require.NoError(t, os.WriteFile(e.cfg.Journalctl, []byte(script), 0o755))
	e.cfg.ExecTimeout = 500 * time.Millisecond
	e.cfg.Units = nil
	f := e.presign(t, "logs-hung", 1<<20)
	key := bundles.SupportBundleKey("node_1", "logs-hung")
	r := e.run(t, map[string]any{"uploadUrl": f.UploadURL, "maxBytes": f.MaxBytes, "bundleKey": key}, nil)
	require.Equal(t, kind.StatusSucceeded, r.Status, r.Message)
	var res logs.Result
	require.NoError(t, json.Unmarshal(r.Data, &res))
	var note string
	for _, fr := range res.Files {
		if fr.Name == "journal/warnings.log" {
			note = fr.Note
		}
	}
	require.Contains(t, note, "timed out and was killed")

	b, err := os.ReadFile(pidFile)
	require.NoError(t, err)
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	require.NoError(t, err)
	require.False(t, alive(pid), "the forked helper died with its group")
}

func alive(pid int) bool {
	p, err := os.FindProcess(pid)
	if err != nil {
		return false
	}
	// Signal 0 checks existence; a zombie awaiting its reaper counts as gone.
	if err := p.Signal(syscallZero); err != nil {
		return false
	}
	st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	return err == nil && !strings.Contains(string(st), ") Z ")
}

func TestMissingSourcesAreNoted(t *testing.T) {
	e := setup(t, 1)
	e.cfg.Journalctl = filepath.Join(e.dir, "no-such-journalctl")
	e.cfg.KmsgPath = filepath.Join(e.dir, "no-kmsg")
	f := e.presign(t, "logs-missing", 1<<20)
	r := e.run(t, map[string]any{"uploadUrl": f.UploadURL, "maxBytes": f.MaxBytes}, nil)
	require.Equal(t, kind.StatusSucceeded, r.Status, r.Message)
	require.Contains(t, string(r.Data), "no-such-journalctl")
	require.Contains(t, string(r.Data), "opening kernel log")
}
