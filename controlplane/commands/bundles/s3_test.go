package bundles_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"
	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/controlplane/commands/bundles"
)

// s3Env is a store on a real S3 protocol implementation, gofakes3 on its
// in-memory backend, with the bucket "bundles", path style as for MinIO.
// gofakes3 routes, stores and answers as S3 does (XML errors, 404 for a
// missing key, multipart uploads, aws-chunked bodies of a single PUT) but
// does not check SigV4 signatures or their expiry: the signing is
// minio-go's.
type s3Env struct {
	store *bundles.S3Store
	// client is what a node or an operator sends with: plain net/http,
	// trusting the server's certificate.
	client *http.Client
}

// newS3 serves gofakes3 over TLS, as S3 is reached in production (and
// minio-go then sends unsigned payloads, not aws-chunked ones, which
// gofakes3 does not decode in a multipart part), or over plain HTTP.
func newS3(t *testing.T, tls bool) s3Env {
	t.Helper()
	backend := s3mem.New()
	require.NoError(t, backend.CreateBucket("bundles"))
	h := gofakes3.New(backend).Server()
	srv := httptest.NewUnstartedServer(h)
	if tls {
		srv.StartTLS()
	} else {
		srv.Start()
	}
	t.Cleanup(srv.Close)
	store, err := bundles.NewS3StoreWithTransport(bundles.S3Config{Endpoint: srv.URL, Region: "us-east-1", Bucket: "bundles", PathStyle: true, AccessKeyID: "AKID", SecretAccessKey: "secret"}, srv.Client().Transport)
	require.NoError(t, err)
	return s3Env{store: store, client: srv.Client()}
}

// put uploads body to a presigned URL as the logs plugin does: a plain
// net/http PUT with a Content-Length and a Content-Type that the URL does
// not sign.
func (e s3Env) put(t *testing.T, rawURL string, body []byte) int {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPut, rawURL, bytes.NewReader(body))
	require.NoError(t, err)
	req.ContentLength = int64(len(body))
	req.Header.Set("Content-Type", "application/gzip")
	resp, err := e.client.Do(req)
	require.NoError(t, err)
	msg, _ := io.ReadAll(resp.Body)
	require.NoError(t, resp.Body.Close())
	require.Less(t, resp.StatusCode, 300, "PUT answered %s: %s", resp.Status, msg)
	return resp.StatusCode
}

// get reads a presigned URL as an operator's curl does.
func (e s3Env) get(t *testing.T, rawURL string) []byte {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, rawURL, nil)
	require.NoError(t, err)
	resp, err := e.client.Do(req)
	require.NoError(t, err)
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	require.Equal(t, http.StatusOK, resp.StatusCode, "GET answered %s: %s", resp.Status, b)
	return b
}

func TestS3StoreRoundTrip(t *testing.T) {
	e := newS3(t, true)
	store := e.store
	b := bundles.New(store, 64)
	ctx := t.Context()

	key, f, err := b.Presign(ctx, "node_1", "api:t:k", time.Now().Add(10*time.Minute))
	require.NoError(t, err)
	require.Equal(t, "support-bundles/node_1/t:k.bundle", key)
	require.NotContains(t, f.UploadURL, "secret")
	require.Contains(t, f.UploadURL, "/bundles/support-bundles/node_1/t%3Ak.bundle?")

	body := []byte("a small bundle")
	require.Equal(t, http.StatusOK, e.put(t, f.UploadURL, body))

	sum := sha256.Sum256(body)
	info, err := b.Check(ctx, key, hex.EncodeToString(sum[:]))
	require.NoError(t, err)
	require.EqualValues(t, len(body), info.Size)
	st, err := store.Stat(ctx, key)
	require.NoError(t, err)
	require.EqualValues(t, len(body), st.Size)
	require.Equal(t, key, st.Key)
	require.WithinDuration(t, time.Now(), st.ModTime, time.Minute)

	u, _, err := b.DownloadURL(ctx, key, time.Minute)
	require.NoError(t, err)
	require.Equal(t, body, e.get(t, u))

	// A digest other than the node's: Check deletes the object.
	_, err = b.Check(ctx, key, strings.Repeat("0", 64))
	require.ErrorIs(t, err, bundles.ErrDigest)
	_, err = store.Stat(ctx, key)
	require.ErrorIs(t, err, bundles.ErrNotFound)

	// S3 takes an oversize PUT; Check deletes it when the result lands.
	big := bytes.Repeat([]byte("z"), 100)
	e.put(t, f.UploadURL, big)
	bigSum := sha256.Sum256(big)
	_, err = b.Check(ctx, key, hex.EncodeToString(bigSum[:]))
	require.ErrorIs(t, err, bundles.ErrOverCap)
	_, err = store.Stat(ctx, key)
	require.ErrorIs(t, err, bundles.ErrNotFound)
	_, _, err = b.DownloadURL(ctx, key, time.Minute)
	require.ErrorIs(t, err, bundles.ErrNotFound)
}

// A missing key is ErrNotFound for every read, no error for Delete, and a
// key that could leave the store is refused before any request.
func TestS3StoreMissingAndInvalidKeys(t *testing.T) {
	store := newS3(t, true).store
	ctx := t.Context()
	const key = "support-bundles/node_1/nope.bundle"
	_, err := store.Stat(ctx, key)
	require.ErrorIs(t, err, bundles.ErrNotFound)
	_, _, err = store.Open(ctx, key)
	require.ErrorIs(t, err, bundles.ErrNotFound)
	require.NoError(t, store.Delete(ctx, key))
	_, err = bundles.New(store, 64).Check(ctx, key, strings.Repeat("0", 64))
	require.ErrorIs(t, err, bundles.ErrNotFound)

	for _, bad := range []string{"../escape", "a//b", ".bc-uploads/x", ""} {
		_, err = store.Stat(ctx, bad)
		require.ErrorIs(t, err, bundles.ErrInvalidKey, "%q", bad)
		_, _, err = store.Open(ctx, bad)
		require.ErrorIs(t, err, bundles.ErrInvalidKey, "%q", bad)
		require.ErrorIs(t, store.Delete(ctx, bad), bundles.ErrInvalidKey, "%q", bad)
		_, err = store.PresignPut(ctx, bad, time.Now().Add(time.Minute), 1)
		require.ErrorIs(t, err, bundles.ErrInvalidKey, "%q", bad)
		_, err = store.PresignGet(ctx, bad, time.Now().Add(time.Minute))
		require.ErrorIs(t, err, bundles.ErrInvalidKey, "%q", bad)
	}
}

// A key with characters that need escaping round-trips through a presigned
// PUT, Open and a presigned GET.
func TestS3StoreOddKey(t *testing.T) {
	e := newS3(t, true)
	store := e.store
	ctx := t.Context()
	key := bundles.SupportBundleKey("node_1", "api:tenant_1:caller key/with?odd#chars%+")
	p, err := store.PresignPut(ctx, key, time.Now().Add(time.Hour), 100)
	require.NoError(t, err)
	e.put(t, p.URL, []byte("hello"))

	r, info, err := store.Open(ctx, key)
	require.NoError(t, err)
	got, err := io.ReadAll(r)
	require.NoError(t, err)
	require.NoError(t, r.Close())
	require.Equal(t, "hello", string(got))
	require.Equal(t, key, info.Key)
	require.EqualValues(t, 5, info.Size)

	u, err := store.PresignGet(ctx, key, time.Now().Add(time.Minute))
	require.NoError(t, err)
	require.Equal(t, "hello", string(e.get(t, u)))
}

// A history archive larger than one part goes up as a multipart upload and
// reads back whole.
func TestS3StorePutMultipart(t *testing.T) {
	store := newS3(t, true).store
	ctx := t.Context()
	body := bytes.Repeat([]byte("0123456789abcdef"), (17<<20)/16) // over minio-go's 16 MiB part
	const key = "history/t1/big.obj"
	require.NoError(t, store.Put(ctx, key, bytes.NewReader(body), int64(len(body))))
	r, info, err := store.Open(ctx, key)
	require.NoError(t, err)
	got, err := io.ReadAll(r)
	require.NoError(t, err)
	require.NoError(t, r.Close())
	require.EqualValues(t, len(body), info.Size)
	require.True(t, bytes.Equal(body, got), "the object reads back as written")
}

// Over plain HTTP (a MinIO on the LAN) minio-go signs a single PUT's body
// in aws-chunked form; the store and a node's presigned PUT work there too.
func TestS3StorePlainHTTP(t *testing.T) {
	e := newS3(t, false)
	ctx := t.Context()
	const key = "history/t1/manifest.json"
	require.NoError(t, e.store.Put(ctx, key, strings.NewReader("manifest"), 8))
	r, info, err := e.store.Open(ctx, key)
	require.NoError(t, err)
	got, err := io.ReadAll(r)
	require.NoError(t, err)
	require.NoError(t, r.Close())
	require.Equal(t, "manifest", string(got))
	require.EqualValues(t, 8, info.Size)

	p, err := e.store.PresignPut(ctx, "support-bundles/n/k.bundle", time.Now().Add(time.Minute), 64)
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(p.URL, "http://"), p.URL)
	e.put(t, p.URL, []byte("bundle"))
	u, err := e.store.PresignGet(ctx, "support-bundles/n/k.bundle", time.Now().Add(time.Minute))
	require.NoError(t, err)
	require.Equal(t, "bundle", string(e.get(t, u)))
}

func TestNewS3StoreChecksConfig(t *testing.T) {
	ok := bundles.S3Config{Endpoint: "https://s3.eu-west-1.amazonaws.com/", Region: "eu-west-1", Bucket: "b", AccessKeyID: "a", SecretAccessKey: "s"}
	_, err := bundles.NewS3Store(ok)
	require.NoError(t, err)
	for name, mutate := range map[string]func(*bundles.S3Config){
		"no scheme": func(c *bundles.S3Config) { c.Endpoint = "s3.amazonaws.com" },
		"ftp":       func(c *bundles.S3Config) { c.Endpoint = "ftp://s3.amazonaws.com" },
		"a path":    func(c *bundles.S3Config) { c.Endpoint = "https://gw.example.com/s3" },
		"no bucket": func(c *bundles.S3Config) { c.Bucket = "" },
		"no region": func(c *bundles.S3Config) { c.Region = "" },
		"no key id": func(c *bundles.S3Config) { c.AccessKeyID = "" },
		"no secret": func(c *bundles.S3Config) { c.SecretAccessKey = "" },
	} {
		c := ok
		mutate(&c)
		_, err := bundles.NewS3Store(c)
		require.Error(t, err, name)
	}
}
