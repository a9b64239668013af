package bundles_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/controlplane/commands/bundles"
)

// s3ish is the part of an S3-compatible server the store uses: path-style
// objects under one bucket, presigned requests only, no size cap on PUT
// (as S3 has none for a presigned PUT).
type s3ish struct {
	lock    sync.Mutex
	objects map[string][]byte
}

func (s *s3ish) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	if q.Get("X-Amz-Algorithm") != "AWS4-HMAC-SHA256" || len(q.Get("X-Amz-Signature")) != 64 || q.Get("X-Amz-SignedHeaders") != "host" {
		http.Error(w, "<Error><Code>AccessDenied</Code></Error>", http.StatusForbidden)
		return
	}
	key, ok := strings.CutPrefix(r.URL.Path, "/bundles/")
	if !ok {
		http.Error(w, "<Error><Code>NoSuchBucket</Code></Error>", http.StatusNotFound)
		return
	}
	s.lock.Lock()
	defer s.lock.Unlock()
	switch r.Method {
	case http.MethodPut:
		b, _ := io.ReadAll(r.Body)
		s.objects[key] = b
	case http.MethodGet, http.MethodHead:
		b, ok := s.objects[key]
		if !ok {
			http.Error(w, "<Error><Code>NoSuchKey</Code></Error>", http.StatusNotFound)
			return
		}
		w.Header().Set("Last-Modified", time.Now().UTC().Format(http.TimeFormat))
		http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(b))
	case http.MethodDelete:
		delete(s.objects, key)
		w.WriteHeader(http.StatusNoContent)
	}
}

func TestS3StoreRoundTrip(t *testing.T) {
	fake := &s3ish{objects: map[string][]byte{}}
	srv := httptest.NewServer(fake)
	t.Cleanup(srv.Close)
	store, err := bundles.NewS3Store(bundles.S3Config{Endpoint: srv.URL, Region: "us-east-1", Bucket: "bundles", PathStyle: true, AccessKeyID: "AKID", SecretAccessKey: "secret"})
	require.NoError(t, err)
	b := bundles.New(store, 64)
	ctx := context.Background()

	key, f, err := b.Presign(ctx, "node_1", "api:t:k", time.Now().Add(10*time.Minute))
	require.NoError(t, err)
	require.Equal(t, "support-bundles/node_1/t:k.bundle", key)
	require.NotContains(t, f.UploadURL, "secret")

	body := []byte("a small bundle")
	req, err := http.NewRequest(http.MethodPut, f.UploadURL, bytes.NewReader(body))
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)

	sum := sha256.Sum256(body)
	info, err := b.Check(ctx, key, hex.EncodeToString(sum[:]))
	require.NoError(t, err)
	require.EqualValues(t, len(body), info.Size)
	st, err := store.Stat(ctx, key)
	require.NoError(t, err)
	require.EqualValues(t, len(body), st.Size)

	u, _, err := b.DownloadURL(ctx, key, time.Minute)
	require.NoError(t, err)
	r, err := http.Get(u)
	require.NoError(t, err)
	got, _ := io.ReadAll(r.Body)
	r.Body.Close()
	require.Equal(t, body, got)

	// S3 takes an oversize PUT; Check deletes it when the result lands.
	big := bytes.Repeat([]byte("z"), 100)
	req, _ = http.NewRequest(http.MethodPut, f.UploadURL, bytes.NewReader(big))
	resp, err = http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	bigSum := sha256.Sum256(big)
	_, err = b.Check(ctx, key, hex.EncodeToString(bigSum[:]))
	require.ErrorIs(t, err, bundles.ErrOverCap)
	_, err = store.Stat(ctx, key)
	require.ErrorIs(t, err, bundles.ErrNotFound)
	_, _, err = b.DownloadURL(ctx, key, time.Minute)
	require.ErrorIs(t, err, bundles.ErrNotFound)
}
