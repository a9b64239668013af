package bundles_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/controlplane/commands/bundles"
)

type clock struct {
	lock sync.Mutex
	t    time.Time
}

func (c *clock) now() time.Time {
	c.lock.Lock()
	defer c.lock.Unlock()
	return c.t
}

func (c *clock) advance(d time.Duration) {
	c.lock.Lock()
	defer c.lock.Unlock()
	c.t = c.t.Add(d)
}

type dirEnv struct {
	store *bundles.DirStore
	root  string
	srv   *httptest.Server
	clock *clock
}

// setupDir serves a DirStore on a real HTTP server, as the control plane does.
func setupDir(t *testing.T) *dirEnv {
	t.Helper()
	env := &dirEnv{root: t.TempDir(), clock: &clock{t: time.Now().UTC()}}
	mux := http.NewServeMux()
	env.srv = httptest.NewServer(mux)
	t.Cleanup(env.srv.Close)
	store, err := bundles.NewDirStore(bundles.DirOptions{
		Root:    env.root,
		BaseURL: env.srv.URL + "/v1/blobs",
		Secret:  bytes.Repeat([]byte("k"), 32),
		Now:     env.clock.now,
	})
	require.NoError(t, err)
	mux.Handle(store.MountPath()+"/", store.Handler())
	env.store = store
	return env
}

// files lists every regular file under the store's root, temporary ones too.
func (e *dirEnv) files(t *testing.T) []string {
	t.Helper()
	var out []string
	require.NoError(t, filepath.WalkDir(e.root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			rel, _ := filepath.Rel(e.root, p)
			out = append(out, filepath.ToSlash(rel))
		}
		return nil
	}))
	return out
}

func put(t *testing.T, method, u string, body io.Reader, length int64) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(method, u, body)
	require.NoError(t, err)
	req.ContentLength = length
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

const key = "support-bundles/node_1/logs-0412.bundle"

func presign(t *testing.T, e *dirEnv, maxBytes int64) bundles.PresignedPut {
	t.Helper()
	p, err := e.store.PresignPut(context.Background(), key, e.clock.now().Add(time.Hour), maxBytes)
	require.NoError(t, err)
	return p
}

func TestDirUploadAndDownload(t *testing.T) {
	e := setupDir(t)
	p := presign(t, e, 1024)
	require.Equal(t, http.MethodPut, p.Method)
	require.EqualValues(t, 1024, p.MaxBytes)
	require.NotContains(t, p.URL, "kkkk", "the secret never travels")

	body := bytes.Repeat([]byte("x"), 1024) // exactly at the cap
	resp, text := put(t, http.MethodPut, p.URL, bytes.NewReader(body), int64(len(body)))
	require.Equal(t, http.StatusOK, resp.StatusCode, text)
	var rec bundles.UploadReceipt
	require.NoError(t, json.Unmarshal([]byte(text), &rec))
	sum := sha256.Sum256(body)
	require.Equal(t, hex.EncodeToString(sum[:]), rec.SHA256)
	require.EqualValues(t, 1024, rec.Size)
	require.Equal(t, []string{key}, e.files(t))

	info, err := e.store.Stat(context.Background(), key)
	require.NoError(t, err)
	require.EqualValues(t, 1024, info.Size)

	get, err := e.store.PresignGet(context.Background(), key, e.clock.now().Add(time.Minute))
	require.NoError(t, err)
	r, err := http.Get(get)
	require.NoError(t, err)
	defer r.Body.Close()
	got, _ := io.ReadAll(r.Body)
	require.Equal(t, http.StatusOK, r.StatusCode)
	require.Equal(t, body, got)

	// A retry of the same upload overwrites: the key holds one bundle.
	resp, text = put(t, http.MethodPut, p.URL, strings.NewReader("second"), 6)
	require.Equal(t, http.StatusOK, resp.StatusCode, text)
	info, err = e.store.Stat(context.Background(), key)
	require.NoError(t, err)
	require.EqualValues(t, 6, info.Size)
}

// "an upload after the deadline, with a wrong signature, with the wrong
// method, or over the cap is refused by the store and nothing partial is left"
func TestDirRefusalsLeaveNothing(t *testing.T) {
	body := func(n int) []byte { return bytes.Repeat([]byte("y"), n) }
	tamper := func(u, param, v string) string {
		pu, _ := url.Parse(u)
		q := pu.Query()
		q.Set(param, v)
		pu.RawQuery = q.Encode()
		return pu.String()
	}
	cases := []struct {
		name   string
		do     func(e *dirEnv, p bundles.PresignedPut) (*http.Response, string)
		status int
		says   string
	}{
		{"after the deadline", func(e *dirEnv, p bundles.PresignedPut) (*http.Response, string) {
			e.clock.advance(time.Hour + time.Second)
			return put(t, http.MethodPut, p.URL, bytes.NewReader(body(10)), 10)
		}, http.StatusForbidden, "deadline has passed"},
		{"wrong signature", func(e *dirEnv, p bundles.PresignedPut) (*http.Response, string) {
			return put(t, http.MethodPut, tamper(p.URL, "bc-signature", strings.Repeat("ab", 32)), bytes.NewReader(body(10)), 10)
		}, http.StatusForbidden, "signature does not verify"},
		{"raised cap", func(e *dirEnv, p bundles.PresignedPut) (*http.Response, string) {
			return put(t, http.MethodPut, tamper(p.URL, "bc-max-bytes", "999999"), bytes.NewReader(body(200)), 200)
		}, http.StatusForbidden, "signature does not verify"},
		{"extended deadline", func(e *dirEnv, p bundles.PresignedPut) (*http.Response, string) {
			return put(t, http.MethodPut, tamper(p.URL, "bc-expires", "99999999999"), bytes.NewReader(body(10)), 10)
		}, http.StatusForbidden, "signature does not verify"},
		{"another key", func(e *dirEnv, p bundles.PresignedPut) (*http.Response, string) {
			return put(t, http.MethodPut, strings.Replace(p.URL, "node_1", "node_2", 1), bytes.NewReader(body(10)), 10)
		}, http.StatusForbidden, "signature does not verify"},
		{"no signature", func(e *dirEnv, p bundles.PresignedPut) (*http.Response, string) {
			return put(t, http.MethodPut, strings.SplitN(p.URL, "?", 2)[0], bytes.NewReader(body(10)), 10)
		}, http.StatusForbidden, "must appear once"},
		{"POST to a PUT URL", func(e *dirEnv, p bundles.PresignedPut) (*http.Response, string) {
			return put(t, http.MethodPost, p.URL, bytes.NewReader(body(10)), 10)
		}, http.StatusMethodNotAllowed, "POST"},
		{"GET with a PUT URL", func(e *dirEnv, p bundles.PresignedPut) (*http.Response, string) {
			return put(t, http.MethodGet, p.URL, nil, 0)
		}, http.StatusMethodNotAllowed, "signed for PUT"},
		{"PUT with a GET URL", func(e *dirEnv, p bundles.PresignedPut) (*http.Response, string) {
			u, err := e.store.PresignGet(context.Background(), key, e.clock.now().Add(time.Minute))
			require.NoError(t, err)
			return put(t, http.MethodPut, u, bytes.NewReader(body(10)), 10)
		}, http.StatusMethodNotAllowed, "signed for GET"},
		{"Content-Length over the cap", func(e *dirEnv, p bundles.PresignedPut) (*http.Response, string) {
			return put(t, http.MethodPut, p.URL, bytes.NewReader(body(101)), 101)
		}, http.StatusRequestEntityTooLarge, "Content-Length 101 over 100"},
		{"chunked body over the cap", func(e *dirEnv, p bundles.PresignedPut) (*http.Response, string) {
			// No Content-Length: the bytes are counted as they stream.
			return put(t, http.MethodPut, p.URL, io.MultiReader(bytes.NewReader(body(60)), bytes.NewReader(body(60))), -1)
		}, http.StatusRequestEntityTooLarge, "more than 100 bytes"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := setupDir(t)
			p := presign(t, e, 100)
			resp, text := c.do(e, p)
			require.Equal(t, c.status, resp.StatusCode, text)
			require.Contains(t, text, c.says)
			require.Empty(t, e.files(t), "nothing partial is left")
			_, err := e.store.Stat(context.Background(), key)
			require.ErrorIs(t, err, bundles.ErrNotFound)
		})
	}
}

// failingReader yields n bytes and then an error, as a connection cut mid-upload.
type failingReader struct{ n int }

func (r *failingReader) Read(p []byte) (int, error) {
	if r.n == 0 {
		return 0, io.ErrUnexpectedEOF
	}
	k := min(len(p), r.n)
	for i := range k {
		p[i] = 'z'
	}
	r.n -= k
	return k, nil
}

// A connection cut mid-upload leaves nothing under the key.
func TestDirCutOffUploadLeavesNothing(t *testing.T) {
	e := setupDir(t)
	p := presign(t, e, 1000)
	req := httptest.NewRequest(http.MethodPut, p.URL, &failingReader{n: 300})
	req.ContentLength = 500
	w := httptest.NewRecorder()
	e.store.Handler().ServeHTTP(w, req)
	require.Equal(t, http.StatusBadRequest, w.Code, w.Body.String())
	require.Contains(t, w.Body.String(), "cut off")
	require.Empty(t, e.files(t))

	// A body shorter than its Content-Length is cut off too.
	req = httptest.NewRequest(http.MethodPut, p.URL, strings.NewReader("short"))
	req.ContentLength = 50
	w = httptest.NewRecorder()
	e.store.Handler().ServeHTTP(w, req)
	require.Equal(t, http.StatusBadRequest, w.Code)
	require.Empty(t, e.files(t))
}

func TestDirPresignRefusals(t *testing.T) {
	e := setupDir(t)
	ctx := context.Background()
	_, err := e.store.PresignPut(ctx, key, e.clock.now().Add(-time.Second), 10)
	require.ErrorIs(t, err, bundles.ErrExpiry)
	_, err = e.store.PresignPut(ctx, key, e.clock.now().Add(8*24*time.Hour), 10)
	require.ErrorIs(t, err, bundles.ErrExpiry)
	_, err = e.store.PresignPut(ctx, "support-bundles/../../etc/passwd", e.clock.now().Add(time.Hour), 10)
	require.ErrorIs(t, err, bundles.ErrInvalidKey)
	_, err = e.store.PresignPut(ctx, key, e.clock.now().Add(time.Hour), 0)
	require.Error(t, err)
	_, err = bundles.NewDirStore(bundles.DirOptions{Root: t.TempDir(), BaseURL: "https://x", Secret: []byte("short")})
	require.Error(t, err)
}

func TestCheckKey(t *testing.T) {
	for _, k := range []string{"", "/abs", "a//b", "a/./b", "a/../b", "..", "a\\b", "a\x00b", ".bc-uploads/x", strings.Repeat("a", 1025)} {
		require.ErrorIs(t, bundles.CheckKey(k), bundles.ErrInvalidKey, "%q", k)
	}
	for _, k := range []string{"a", "support-bundles/node_1/k.bundle", "a/b c/d%20e:f", ".hidden/x"} {
		require.NoError(t, bundles.CheckKey(k), "%q", k)
	}
}

// A key with characters that need escaping still round-trips.
func TestDirOddKey(t *testing.T) {
	e := setupDir(t)
	k := bundles.SupportBundleKey("node_1", "api:tenant_1:caller key/with?odd#chars%")
	p, err := e.store.PresignPut(context.Background(), k, e.clock.now().Add(time.Hour), 100)
	require.NoError(t, err)
	resp, text := put(t, http.MethodPut, p.URL, strings.NewReader("hello"), 5)
	require.Equal(t, http.StatusOK, resp.StatusCode, text)
	info, err := e.store.Stat(context.Background(), k)
	require.NoError(t, err)
	require.EqualValues(t, 5, info.Size)
}

func TestOpenFromConfig(t *testing.T) {
	dir := t.TempDir()
	secret := filepath.Join(dir, "secret")
	require.NoError(t, os.WriteFile(secret, []byte("c2VjcmV0LXNlY3JldC1zZWNyZXQtc2VjcmV0LXNlY3JldC0xMjM0\n"), 0o600))
	s, err := bundles.Open(bundles.Config{Blob: bundles.BlobConfig{Driver: "dir", Dir: &bundles.DirConfig{Path: filepath.Join(dir, "blobs"), BaseURL: "https://cp.example.com/v1/blobs", SecretFile: secret}}})
	require.NoError(t, err)
	require.IsType(t, &bundles.DirStore{}, s)

	s, err = bundles.Open(bundles.Config{Blob: bundles.BlobConfig{Driver: "s3", S3: &bundles.S3Config{Endpoint: "https://s3.amazonaws.com", Region: "us-east-1", Bucket: "b", AccessKeyID: "a", SecretAccessKey: "s"}}})
	require.NoError(t, err)
	require.IsType(t, &bundles.S3Store{}, s)

	_, err = bundles.Open(bundles.Config{Blob: bundles.BlobConfig{Driver: "ftp"}})
	require.ErrorContains(t, err, "must be dir or s3")
	require.Equal(t, int64(256<<20), bundles.Config{}.EffectiveMaxBytes())
}
